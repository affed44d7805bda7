"""``make doctor`` (``python -m hango.doctor``): check a learner's set-up and say what to do.

Each check prints ``ok`` or ``problem`` with the one thing to do about it; the exit status is the
number of problems (0: ready for ``make lab``). ``--lab-settings`` writes JupyterLab's settings
overrides for this project's ``.venv`` (the news pop-up off, no update check), which is what
``make lab`` runs after installing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the checks import hango lazily: a broken install must still be diagnosed
    from hango.settings import Settings

LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def write_lab_settings(prefix: Path | None = None) -> Path:
    """JupyterLab reads ``{sys.prefix}/share/jupyter/lab/settings/overrides.json`` at start."""
    target = (prefix or Path(sys.prefix)) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(target.read_text(encoding="utf-8")) if target.exists() else {}
    current.update(LAB_OVERRIDES)
    target.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    return target


def version_text(number: int) -> str:
    """A server version as people write it: ``150018`` is 15.18, ``90624`` is 9.6.24."""
    if number >= 100000:
        return f"{number // 10000}.{number % 10000}"
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


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
    import psycopg

    from hango.db import BEGIN_APP

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


def _python() -> str | None:
    print(f"  Python {sys.version.split()[0]} at {sys.executable}")
    if sys.version_info < (3, 11):  # noqa: UP036  (a venv made by an old Python)
        return (f"Python {sys.version.split()[0]} is too old; hango needs 3.11+. "
                "Run `rm -rf .venv` and `make lab PYTHON=python3.12`.")
    return None


def _package() -> str | None:
    try:
        import hango
    except ImportError as exc:  # pragma: no cover - the module itself lives in hango
        return f"hango does not import ({exc}); run `make lab` to install it into .venv"
    del hango
    return None


def _settings() -> str | None:
    from hango.settings import SettingsError, load_settings

    try:
        load_settings()
    except SettingsError as exc:
        return f"{exc}; fix or unset the variable"
    return None


def _data_dir() -> str | None:
    from hango.db import resolve_data_dir
    from hango.settings import load_settings

    settings = load_settings()
    if settings.database_url is not None:
        print("  not used: HANGO_DATABASE_URL names an external server")
        return None

    data = resolve_data_dir(settings)
    probe = data if data.exists() else data.parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        return f"{data} is not writable: set HANGO_DATA_DIR to a folder you can write"
    free = shutil.disk_usage(probe).free
    if free < 200 * 1024 * 1024:
        return f"only {free // 2**20} MiB free under {probe}; the database needs about 200 MiB"
    print(f"  data dir: {data}")
    return None


def _database() -> str | None:
    from hango.db import database_name, get_database
    from hango.db_errors import hide_password
    from hango.settings import load_settings

    settings = load_settings()
    if settings.database_url is not None:  # an external server: reach it, never start it
        where = hide_password(settings.database_url)
        try:
            db = get_database()
            found = status(db.app_conninfo, settings)
        except Exception as exc:  # report any failure as the one line an operator can act on
            return f"the external server at {where} (HANGO_DATABASE_URL): {exc}"
        print(f"  PostgreSQL {found.version} at {where}, database {database_name(settings)}; "
              f"a transaction of the app runs as {found.app_role}, row-level security forced "
              f"on {found.forced} of {found.tables} tenant tables")
        if found.app_role == found.login or found.forced < found.tables:
            return ("the app's transactions are not held by row-level security: see "
                    "`hango db status` and README, \"Managed PostgreSQL and poolers\"")
        return None
    try:
        db = get_database()
        with db.app() as conn:
            version = conn.execute("SHOW server_version").fetchone()
    except Exception as exc:  # report any failure as the one line a learner can act on
        return f"the database does not start: {exc}"
    print(f"  PostgreSQL {version[0] if version else '?'} (embedded)")
    return None


def _port() -> str | None:
    from hango.settings import load_settings

    settings = load_settings()
    with socket.socket() as sock:
        if sock.connect_ex((settings.host, settings.port)) == 0:
            return (f"port {settings.port} is in use (another `hango serve`?): stop it or set "
                    "HANGO_PORT; the notebooks do not need it")
    return None


def _jupyter() -> str | None:
    if shutil.which("jupyter-lab", path=str(Path(sys.executable).parent)) is None:
        return "JupyterLab is not installed in this environment: run `make lab`"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        print("  running as root: `make lab` passes --allow-root to jupyter")
    return None


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("Python 3.11+", _python), ("hango imports", _package), ("HANGO_* settings", _settings),
    ("data folder", _data_dir), ("database", _database), ("API port", _port),
    ("JupyterLab", _jupyter),
]
NEED_SETTINGS = {"data folder", "database", "API port"}  # they read HANGO_* themselves


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--lab-settings" in args:
        print(f"JupyterLab settings: {write_lab_settings()}")
        return 0
    problems, settings_ok = 0, True
    for name, check in CHECKS:
        if name in NEED_SETTINGS and not settings_ok:
            print(f"skipped {name}: it needs the HANGO_* settings above")
            continue
        problem = check()
        print(f"{'ok     ' if problem is None else 'PROBLEM'} {name}" + (f": {problem}" if problem else ""))
        problems += problem is not None
        settings_ok = settings_ok and not (name == "HANGO_* settings" and problem)
    print("ready: run `make lab`" if not problems else f"{problems} problem(s); fix them, then `make doctor`")
    return problems


if __name__ == "__main__":
    raise SystemExit(main())
