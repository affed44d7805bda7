"""Noisy neighbour: tenant B's GET p99 while tenant A lists a large directory, over B alone.

In one process and one run, on one server (uvicorn in a thread, the real database behind it):

- tenant A has one agent with ``--files`` files in one directory (``/big/``), made by the
  database in one ``INSERT ... SELECT generate_series``;
- tenant B has one small file, which it GETs ``--gets`` times in a row (one client, keep-alive);
- ``alone``: B's GETs with nothing else running (measured first and again last);
- ``before``: ``--listers`` clients of A each list ``/big/`` over and over *whole*, the way the
  API did before listings were paged (main's unbounded ``GROUP BY`` query and one response with every
  entry; that route is rebuilt here, beside the real one, so both run in the same process);
- ``after``: the same clients list ``/big/`` with the real, paginated API: page after page of
  the default size, following ``next_cursor`` to the end, then again.

The figure is B's p99 under each load divided by B's p99 alone. Run:
``.venv/bin/python bench/noisy_neighbour.py [--files 50000] [--listers 4] [--gets 200]`` (about
a minute at the defaults; a phase's GETs stop after ``--deadline`` seconds).
A benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Annotated

import httpx
from fastapi import Depends, FastAPI, Query

from hango.agents import create_tenant, create_token, drop_tenant, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.api.deps import _Agent, _agent
from hango.api.files import EntryOut, Listing
from hango.db import Database
from hango.fs.backend import like_escape
from hango.fs.path import clean_dir
from hango.settings import load_settings

# main's listing before pages, verbatim: every child of the directory in one query and one
# response (hango/fs/backend.py ``ls`` and hango/api/app.py ``list_files`` at a6cd9b3).
UNBOUNDED_LS = """SELECT split_part(substr(path, %(n)s), '/', 1) AS child,
                         bool_or(strpos(substr(path, %(n)s), '/') > 0) AS is_dir,
                         max(size), max(version)
                    FROM agent_files
                   WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path LIKE %(like)s
                   GROUP BY child ORDER BY child"""


def add_unbounded_route(app: FastAPI) -> None:
    def unbounded(agent: Annotated[_Agent, Depends(_agent)],
                  dir: Annotated[str, Query()] = "/") -> Listing:
        directory = clean_dir(dir)
        with agent.db.tenant(agent.principal.tenant_id) as conn:
            rows = conn.execute(UNBOUNDED_LS, {
                "t": agent.principal.tenant_id, "a": agent.agent_id, "n": len(directory) + 1,
                "like": like_escape(directory) + "%"}).fetchall()
        return Listing(entries=[
            EntryOut(path=directory + child + ("/" if is_dir else ""), is_dir=bool(is_dir),
                     size=0 if is_dir else int(size), version=0 if is_dir else int(version))
            for child, is_dir, size, version in rows])

    app.add_api_route("/before/agents/{agent_id}/files", unbounded, methods=["GET"],
                      response_model=Listing)


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def gets(client: httpx.Client, n: int, deadline_s: float) -> list[float]:
    samples = []
    end = time.monotonic() + deadline_s
    for _ in range(n):
        start = time.perf_counter()
        r = client.get("/v1/agents/b/files/notes/x.md")
        samples.append((time.perf_counter() - start) * 1e3)
        assert r.status_code == 200, r.text
        if time.monotonic() > end:
            break
    return samples


def under_load(base_url: str, token_a: str, client_b: httpx.Client, listers: int, n: int,
               deadline_s: float, list_once: Callable[[httpx.Client], tuple[int, int]]
               ) -> tuple[list[float], dict[str, float]]:
    stop = threading.Event()
    done = {"listings": 0, "requests": 0, "bytes": 0}
    lock = threading.Lock()

    def lister() -> None:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token_a}"},
                          timeout=300) as c:
            while not stop.is_set():
                requests, size = list_once(c)
                with lock:
                    done["listings"] += 1
                    done["requests"] += requests
                    done["bytes"] += size

    threads = [threading.Thread(target=lister, daemon=True) for _ in range(listers)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # let the listers get going
    started = time.perf_counter()
    samples = gets(client_b, n, deadline_s)
    elapsed = time.perf_counter() - started
    stop.set()
    for t in threads:
        t.join()
    return samples, {k: v / elapsed for k, v in done.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50_000, help="files in A's directory")
    parser.add_argument("--listers", type=int, default=4, help="A's concurrent listing clients")
    parser.add_argument("--gets", type=int, default=200, help="B's GETs in each phase")
    parser.add_argument("--deadline", type=float, default=30.0,
                        help="seconds a phase's GETs may take at most")
    args = parser.parse_args()

    db = Database(load_settings(database_name="hango_bench"))
    tenant_a = create_tenant(db, "bench-a-" + uuid.uuid4().hex[:8])
    tenant_b = create_tenant(db, "bench-b-" + uuid.uuid4().hex[:8])
    try:
        save_agent(db, tenant_a, "big")
        save_agent(db, tenant_b, "b")
        with db.admin() as conn:
            # A fixture, not a workload: skip the triggers (quota usage, file-or-directory
            # check) for this one bulk statement; the tenant is dropped at the end.
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                         " SELECT %s, 'big', format('/big/f%%s.md', lpad(i::text, 7, '0')),"
                         "        'x', 1 FROM generate_series(1, %s) AS i",
                         [tenant_a, args.files])
        with db.admin() as conn:
            conn.execute("ANALYZE agent_files")
        token_a = create_token(db, tenant_a, "member", label="bench")
        token_b = create_token(db, tenant_b, "owner", label="bench")
        app = create_app(db)
        add_unbounded_route(app)
        base_url, stop = serve_in_thread(app)
        client_b = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token_b}"},
                                timeout=300)
        assert client_b.put("/v1/agents/b/files/notes/x.md", content=b"hello").status_code == 201
        gets(client_b, 50, 30)  # warm-up

        def unbounded(c: httpx.Client) -> tuple[int, int]:
            r = c.get("/before/agents/big/files", params={"dir": "/big/"})
            assert r.status_code == 200 and len(r.json()["entries"]) == args.files
            return 1, len(r.content)

        def paginated(c: httpx.Client) -> tuple[int, int]:
            requests, size, cursor, seen = 0, 0, None, 0
            while True:
                params = {"dir": "/big/"} | ({"cursor": cursor} if cursor else {})
                r = c.get("/v1/agents/big/files", params=params)
                body = r.json()
                requests, size, seen = requests + 1, size + len(r.content), seen + len(
                    body["entries"])
                if (cursor := body["next_cursor"]) is None:
                    assert seen == args.files
                    return requests, size

        print(f"load before: {loadavg()}; {args.files:,} files in A's /big/, "
              f"{args.listers} listers, {args.gets} GETs of B a phase")
        alone_1 = gets(client_b, args.gets, args.deadline)
        before, before_rate = under_load(base_url, token_a, client_b, args.listers, args.gets,
                                         args.deadline, unbounded)
        after, after_rate = under_load(base_url, token_a, client_b, args.listers, args.gets,
                                       args.deadline, paginated)
        alone_2 = gets(client_b, args.gets, args.deadline)
        load = loadavg()
        alone = alone_1 + alone_2
        base99 = p(alone, 0.99)
        print(f"{'phase':<34} {'GETs':>5} {'p50 ms':>8} {'p99 ms':>8} {'p99 / alone':>12}")
        for name, samples in (("B alone (first)", alone_1), ("B alone (last)", alone_2),
                              ("B alone (both)", alone),
                              ("B while A lists whole (before)", before),
                              ("B while A lists in pages (after)", after)):
            print(f"{name:<34} {len(samples):>5} {statistics.median(samples):>8.2f} "
                  f"{p(samples, 0.99):>8.2f} {p(samples, 0.99) / base99:>11.1f}x")
        for name, rate in (("before", before_rate), ("after", after_rate)):
            print(f"A {name}: {rate['listings']:.2f} whole listings/s, "
                  f"{rate['requests']:.1f} requests/s, {rate['bytes'] / 2**20:.1f} MiB/s")
        print(f"load after: {load}")
        client_b.close()
        stop()
    finally:
        drop_tenant(db, tenant_a)
        drop_tenant(db, tenant_b)
        db.close()


if __name__ == "__main__":
    main()
