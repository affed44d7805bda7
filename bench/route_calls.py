"""What one request costs the server in Python, as counts the machine's load cannot move.

The files API and the runs route are served by uvicorn in a thread of this process (as the tests
serve them); one learner's connection sends each kind of request of ``bench/workshop.py``'s loop
in a row. For each kind it prints, per request: the Python function calls the server made (every
thread: the event loop and the worker threads, counted with ``threading.setprofile``; a
generator's or coroutine's resumption is not a call), the statements it sent to PostgreSQL
(psycopg's executions, BEGIN and COMMIT included), and the hand-offs to a worker thread. Then
the median wall time of the same requests without the counting, which the load does move.

Before/after: run it with another checkout's interpreter (``--baseline`` of ``workshop.py``
describes one) and compare the counts. Run: ``.venv/bin/python bench/route_calls.py [--n 200]``.
"""

from __future__ import annotations

import argparse
import dis
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workshop  # the loop's requests and its client


class Counter:
    """Python calls, statements and thread hand-offs, from every thread, while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.calls = self.statements = self.hops = 0
        self.lock = threading.Lock()
        self.starts: dict[Any, int] = {}

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if not self.on or event != "call":
            return
        code = frame.f_code
        start = self.starts.get(code)
        if start is None:  # where a frame starts; a generator's or coroutine's resume is later
            start = self.starts[code] = next(
                (i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
        if frame.f_lasti > start:
            return
        with self.lock:
            self.calls += 1
            if code.co_name in ("_execute_gen", "_executemany_gen_pipeline", "_exec_command"):
                self.statements += 1  # a query, or BEGIN / COMMIT
            elif code.co_name == "run_sync_in_worker_thread":
                self.hops += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="requests of each kind")
    args = parser.parse_args()
    from hango.agents import drop_tenant
    from hango.api.app import create_app, serve_in_thread
    from hango.db import Database

    counter = Counter()
    threading.setprofile(counter.profile)  # threads started from here on: the server's
    sys.setprofile(None)
    db = Database()
    (tenant, token), = workshop.seats(db, 1, "calls-" + uuid.uuid4().hex[:6])
    url, stop = serve_in_thread(create_app(db))
    http = workshop.Client(url, token)
    run = ("POST", "/v1/agents/a1/runs", b'{"prompt": "hello"}', "application/json")
    kinds: list[tuple[str, Callable[[int], tuple[int, str]]]] = [
        ("PUT memory", lambda i: http.call("PUT", workshop.MEMORY,
                                           workshop.memory(uuid.uuid4().hex, i))),
        ("GET memory (plain GET)", lambda i: http.call("GET", workshop.MEMORY)),
        ("GET a listing", lambda i: http.call("GET", "/v1/agents/a1/files")),
        ("POST run, memory unchanged", lambda i: http.call(*run)),
    ]
    try:
        for i in range(workshop.SKILLS):
            http.call("PUT", f"/v1/agents/a1/files/skills/s{i:02d}/SKILL.md",
                      f"---\nname: s{i:02d}\ndescription: skill {i}\n---\nbody\n".encode())
        print(f"per request, {args.n} of each kind, one connection; {sys.version.split()[0]}; "
              f"load {' '.join(workshop.loadavg())}; "
              f"{time.strftime('%H:%M:%S', time.gmtime())} UTC")
        print(f"  {'request':28} {'Python calls':>12} {'statements':>10} {'hand-offs':>9} "
              f"{'wall ms':>8}")
        for name, call in kinds:
            for i in range(20):  # warm: prepared statements, the agent's cached stack
                status, text = call(i)
                assert status < 300, text
            counter.calls = counter.statements = counter.hops = 0
            counter.on = True
            for i in range(args.n):
                call(i)
            counter.on = False
            walls = []
            for i in range(args.n):
                started = time.perf_counter()
                call(i)
                walls.append(time.perf_counter() - started)
            n = args.n
            print(f"  {name:28} {counter.calls / n:12.0f} {counter.statements / n:10.1f} "
                  f"{counter.hops / n:9.1f} {statistics.median(walls) * 1e3:8.2f}")
    finally:
        http.close()
        stop()
        drop_tenant(db, tenant)
        db.close()


if __name__ == "__main__":
    main()
