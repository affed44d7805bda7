"""What do many CLI commands starting at once cost, to them and to a running server?

Before: every process applied ``schema.sql`` (DROP/CREATE POLICY under an advisory lock), so
30 concurrent ``hango tenant create`` queued on the lock and a running server's GETs waited
behind the DDL's table locks. Now a process compares one version row and runs no DDL.

In one run, on a PostgreSQL server of its own (a temporary data folder, removed at the end):

- ``GET alone``: p50/p90 of a files API GET (uvicorn in a thread, httpx keep-alive) with nothing
  else running; the baseline;
- ``30 x hango tenant create``: the wall time until all 30 commands, started at once as
  subprocesses, have exited, and the same GET's p50/p90 while they run, as a ratio to the
  baseline. On a small machine 30 interpreters starting dominate both;
- ``30 x Database()``: what hango itself does at a process's start (connect, check or apply the
  schema), in 30 threads of this process at once: wall time, and the GET meanwhile.

The commands import ``hango`` from ``PYTHONPATH``: run it once with a checkout of the old code
(``PYTHONPATH=/path/to/old``) and once with this one for before/after. Run:
``.venv/bin/python bench/tenant_create.py [--commands 30]``. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database, EmbeddedServer
from hango.settings import load_settings

HANGO = str(Path(sys.executable).with_name("hango"))


def gets(client: httpx.Client, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        assert client.get("/v1/agents/a1/files/notes/x.md").status_code == 200
        out.append((time.perf_counter() - start) * 1e3)


def pct(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1] if len(samples) > 1 else samples[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=30)
    parser.add_argument("--baseline-seconds", type=float, default=3.0)
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="hango-bench-"))
    env = {**os.environ, "HANGO_DATA_DIR": str(data_dir), "HANGO_DATABASE_NAME": "bench"}
    env.pop("HANGO_DATABASE_URL", None)
    db = Database(load_settings(data_dir=data_dir, database_name="bench", database_url=None))
    try:
        tenant = create_tenant(db, "bench")
        save_agent(db, tenant, "a1", AgentConfig())
        url, stop_server = serve_in_thread(create_app(db))
        headers = {"Authorization": f"Bearer {create_token(db, tenant, 'owner')}"}
        with httpx.Client(base_url=url, headers=headers) as client:
            client.put("/v1/agents/a1/files/notes/x.md", content="hello")
            warm = subprocess.run([HANGO, "tenant", "create", "warm"], env=env,
                                  capture_output=True, text=True)  # imports cached, like later
            assert warm.returncode == 0, warm.stderr

            alone: list[float] = []
            stop = threading.Event()
            reader = threading.Thread(target=gets, args=(client, stop, alone))
            reader.start()
            time.sleep(args.baseline_seconds)
            stop.set()
            reader.join()

            during: list[float] = []
            stop = threading.Event()
            reader = threading.Thread(target=gets, args=(client, stop, during))
            reader.start()
            started = time.perf_counter()
            procs = [subprocess.Popen([HANGO, "tenant", "create", f"cli-{i}"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                     for i in range(args.commands)]
            failed = sum(p.wait() != 0 for p in procs)
            wall = time.perf_counter() - started
            stop.set()
            reader.join()

            # the part hango controls, without 30 interpreters starting: Database() (connect,
            # schema check or application) in 30 threads of this process at once
            opened: list[float] = []
            in_process: list[float] = []
            stop = threading.Event()
            reader = threading.Thread(target=gets, args=(client, stop, in_process))
            reader.start()

            def open_one() -> None:
                start = time.perf_counter()
                Database(db.settings).close()
                opened.append((time.perf_counter() - start) * 1e3)

            started = time.perf_counter()
            openers = [threading.Thread(target=open_one) for _ in range(args.commands)]
            for t in openers:
                t.start()
            for t in openers:
                t.join()
            wall_open = time.perf_counter() - started
            stop.set()
            reader.join()
        stop_server()
    finally:
        db.close()
        EmbeddedServer.pg_ctl(data_dir, "stop", "-m", "fast")
        EmbeddedServer.get(data_dir).cleanup_mode = None
        shutil.rmtree(data_dir, ignore_errors=True)

    import hango
    print(f"hango from {Path(hango.__file__).parent}; load {Path('/proc/loadavg').read_text()[:14]}"
          f"; {os.cpu_count()} cores")
    print(f"{'':32}{'p50 ms':>10}{'p90 ms':>10}{'x alone':>10}{'n':>7}")
    base = statistics.median(alone)
    for name, samples in (("GET alone", alone), (f"GET during {args.commands} commands", during),
                          (f"GET during {args.commands} Database()", in_process)):
        p50 = statistics.median(samples)
        print(f"{name:32}{p50:10.2f}{pct(samples, 90):10.2f}{p50 / base:10.1f}{len(samples):7}")
    print(f"{args.commands} x hango tenant create: {wall:.1f} s wall until all exited, "
          f"{failed} failed")
    print(f"{args.commands} x Database() in threads: {wall_open:.2f} s wall, each p50 "
          f"{statistics.median(opened):.0f} ms, max {max(opened):.0f} ms")


if __name__ == "__main__":
    main()
