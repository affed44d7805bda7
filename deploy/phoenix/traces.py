"""``make traces``: Arize Phoenix, a trace viewer without Docker, in its own virtual environment.

    python deploy/phoenix/traces.py start   # install if needed, start on loopback, print the URL
    python deploy/phoenix/traces.py stop    # stop what ``start`` started

Phoenix lives in ``.traces-venv`` (never in hango's ``.venv``: it pins its own versions of
packages hango uses, ``anthropic`` among them). Both its ports listen on 127.0.0.1 only
(``loopback.py``); its data goes to ``.traces-venv/data``. hango sends to it with
``hango serve --phoenix`` (or ``PHOENIX_COLLECTOR_ENDPOINT``) or ``configure("phoenix")``.
Standard library only: the tests import this file too.

Variables: ``TRACES_VENV`` (default ``.traces-venv``), ``TRACES_PORT`` (6006, UI + OTLP/HTTP),
``TRACES_GRPC_PORT`` (4319, OTLP/gRPC; 4317 is grafana/otel-lgtm's), ``PHOENIX_SPEC`` (the pip
requirement, default below).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PHOENIX_SPEC = "arize-phoenix>=20.26,<21"  # 20.26.1 verified; its own venv, so its own pins
INSTALL_TIMEOUT_S = 900
START_TIMEOUT_S = 120


def venv_dir() -> Path:
    return Path(os.environ.get("TRACES_VENV") or ROOT / ".traces-venv")


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed(venv: Path) -> bool:
    return (venv / "bin" / "phoenix").exists()


def install(venv: Path, quiet: bool = True) -> None:
    """Create ``venv`` and pip-install Phoenix into it (no-op when it is there). Raises
    ``subprocess.CalledProcessError`` or ``TimeoutExpired`` when the registry is unreachable."""
    if installed(venv):
        return
    spec = os.environ.get("PHOENIX_SPEC") or PHOENIX_SPEC
    if not python(venv).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    q = ["-q"] if quiet else []
    subprocess.run([str(python(venv)), "-m", "pip", "install", *q, "--disable-pip-version-check",
                    spec], check=True, timeout=INSTALL_TIMEOUT_S, capture_output=quiet)


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start(venv: Path, port: int, grpc_port: int, workdir: Path,
          log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start Phoenix on 127.0.0.1:``port`` (HTTP) and ``grpc_port``; return once it is healthy.

    Its own session, so a Ctrl-C in the shell that ran ``make traces`` does not reach it. On
    failure the process is stopped and the error names the log file.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    log = log or workdir / "phoenix.log"
    env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_WORKING_DIR": str(workdir),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME"):
        env.pop(var, None)  # hango's own settings are not Phoenix's
    with open(log, "ab") as out:
        proc = subprocess.Popen([str(python(venv)), str(HERE / "loopback.py")], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc.pid)
            raise RuntimeError(f"Phoenix did not start on 127.0.0.1:{port}; see {log}")
        time.sleep(0.5)
    return proc


def stop_process(pid: int, timeout_s: float = 15) -> None:
    """SIGTERM the process group ``start`` created, then SIGKILL after ``timeout_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:  # not our child: poll until it is gone
                pass
            except ProcessLookupError:
                return
            time.sleep(0.2)


def spans(port: int, project: str, limit: int = 1000) -> list[dict[str, object]]:
    """Phoenix's REST API: the spans of ``project`` (newest first)."""
    url = f"http://127.0.0.1:{port}/v1/projects/{project}/spans?limit={limit}"
    with urllib.request.urlopen(url, timeout=10) as r:
        data: list[dict[str, object]] = json.load(r)["data"]
    return data


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "start"
    venv = venv_dir()
    port = int(os.environ.get("TRACES_PORT", "6006"))
    grpc_port = int(os.environ.get("TRACES_GRPC_PORT", "4319"))
    pidfile = venv / "phoenix.pid"
    if command == "start":
        if pidfile.exists() and healthy(port):
            print(f"Phoenix already runs: http://127.0.0.1:{port}")
            return 0
        if not installed(venv):
            print(f"installing Phoenix ({PHOENIX_SPEC}) into {venv} (a few minutes, once)...")
            install(venv, quiet=False)
        proc = start(venv, port, grpc_port, venv / "data")
        pidfile.write_text(str(proc.pid))
        print(f"Phoenix: http://127.0.0.1:{port}  (OTLP/HTTP traces: "
              f"http://127.0.0.1:{port}/v1/traces, gRPC 127.0.0.1:{grpc_port})\n"
              f"send hango's traces: hango serve --phoenix (every run served over HTTP),\n"
              f'  or configure("phoenix") in Python  ->  project "hango"\n'
              f"stop it: make traces-stop   (log: {venv / 'data' / 'phoenix.log'})")
        return 0
    if command == "stop":
        if not pidfile.exists():
            print("Phoenix is not running (no pid file)")
            return 0
        stop_process(int(pidfile.read_text()))
        pidfile.unlink()
        print("Phoenix stopped")
        return 0
    print(f"unknown command {command!r}: use start or stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
