"""Debian's PostgreSQL (else the embedded wheel's) and PgBouncer, started privately for a test
module (tests/test_poolers.py).

A server of its own (``initdb`` in a temporary folder, a Unix socket only, its own port) with a
role as a managed service gives one (``provider``: ``CREATEROLE``, owner of its databases, no
superuser), and one PgBouncer in front of it exposing ONLY the application's databases: one in
transaction pooling mode (the mode of most managed poolers), one in session mode. Nothing of the
machine's own PostgreSQL cluster is touched. :func:`missing` says why it cannot start here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from hango.embedded import pg_bin

ROLE = "provider"  # what a managed service hands out: CREATEROLE, owns its database
PASSWORD = "s3cret-pw"  # in the URLs, so that tests can check no message prints it
MODES = ("transaction", "session")
TINY = "hango_tiny"  # the transaction database again, through ONE server connection
SERVER_CONNECTIONS = 20  # PgBouncer's default_pool_size: server connections per database


def _bin_dir() -> Path:
    """Debian's PostgreSQL (the newest installed), else the embedded wheel's binaries."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else Path(pg_bin("initdb")).parent


def _pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer",) if os.access(p, os.X_OK)), None)


def _run_as() -> str | None:
    """Neither initdb nor PgBouncer runs as root: as root, run them as ``postgres``."""
    return "postgres" if os.geteuid() == 0 else None


def missing() -> str | None:
    """Why the stack cannot run here (``None``: it can)."""
    if _pgbouncer() is None:
        return "PgBouncer is not installed (apt-get install pgbouncer; .ci/run does)"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no user 'postgres' to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Stack:
    """The running server and pooler; :meth:`url` is what ``HANGO_DATABASE_URL`` would be."""

    root: Path
    pg_port: int
    bouncer_port: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def socket_dir(self) -> Path:
        return self.root

    def direct(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """A conninfo straight to the server (its Unix socket), past the pooler."""
        return f"host={self.socket_dir} port={self.pg_port} dbname={dbname} user={user}"

    def url(self, mode: str, role: str = ROLE) -> str:
        """The pooler's URL for ``mode``'s database, as an operator would write it."""
        return (f"postgresql://{role}:{PASSWORD}@127.0.0.1:{self.bouncer_port}/"
                f"{database(mode)}")

    def direct_url(self, dbname: str, role: str = ROLE) -> str:
        return f"postgresql://{role}:{PASSWORD}@/{dbname}?host={self.socket_dir}&port={self.pg_port}"

    def log(self) -> str:
        out = []
        for name in ("postgres.log", "pgbouncer.log"):
            path = self.root / name
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace")
                                                        .splitlines()[-30:]))
        return "\n".join(out)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if (self.root / "data" / "postmaster.pid").exists():
            _call([str(_bin_dir() / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w",
                   "stop"], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def database(mode: str) -> str:
    return f"hango_{mode}"


def _call(args: list[str], check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, user=_run_as(), capture_output=True, text=True, check=check,
                          timeout=120, **kwargs)


def start(query_wait_timeout: int = 60) -> Stack:
    """initdb, the server, the roles and databases, then PgBouncer: about 2 s. A client that
    finds no free server connection waits ``query_wait_timeout`` seconds, then is refused."""
    bins, bouncer = _bin_dir(), _pgbouncer()
    assert bouncer is not None, missing()
    root = Path(tempfile.mkdtemp(prefix="hango-pooler-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    stack = Stack(root, _free_port(), _free_port())
    try:
        _call([str(bins / "initdb"), "-D", str(root / "data"), "-U", "postgres", "-A", "trust",
               "--no-sync", "-E", "UTF8"])
        _call([str(bins / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "postgres.log"),
               "-w", "-o", f"-k {root} -c listen_addresses='' -p {stack.pg_port} -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
               "start"])
        with psycopg.connect(stack.direct(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN CREATEROLE PASSWORD '{PASSWORD}'")
            for mode in MODES:
                conn.execute(f"CREATE DATABASE {database(mode)} OWNER {ROLE}")
        (root / "users.txt").write_text(f'"{ROLE}" "{PASSWORD}"\n"postgres" ""\n')
        lines = [f"{database(mode)} = host={root} port={stack.pg_port} "
                 f"dbname={database(mode)} pool_mode={mode}" for mode in MODES]
        lines.append(f"{TINY} = host={root} port={stack.pg_port} "
                     f"dbname={database('transaction')} pool_mode=transaction pool_size=1")
        (root / "pgbouncer.ini").write_text("\n".join([
            "[databases]", *lines, "",  # only the application's databases: no `postgres`
            "[pgbouncer]", "listen_addr = 127.0.0.1", f"listen_port = {stack.bouncer_port}",
            "unix_socket_dir =", "auth_type = trust", f"auth_file = {root / 'users.txt'}",
            f"logfile = {root / 'pgbouncer.log'}", f"pidfile = {root / 'pgbouncer.pid'}",
            "max_client_conn = 500", f"default_pool_size = {SERVER_CONNECTIONS}",
            f"query_wait_timeout = {query_wait_timeout}", ""]))
        for path in root.iterdir():
            if os.geteuid() == 0:
                shutil.chown(path, "postgres", "postgres")
        stack.procs.append(subprocess.Popen([bouncer, str(root / "pgbouncer.ini")],
                                            user=_run_as(), stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(stack.url("session"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    except BaseException:
        log = stack.log()
        stack.stop()
        raise RuntimeError(f"the PostgreSQL/PgBouncer stack did not start:\n{log}") from None
    return stack
