"""What does the files API cost over the database itself? Write and read p50, next to raw psycopg.

In one process and one run, on the same PostgreSQL server and the same table:

- ``api write``: ``PUT /v1/agents/{agent}/files/{path}`` over real HTTP on loopback (uvicorn in a
  thread, httpx with keep-alive): token lookup, path rule, one INSERT, JSON reply;
- ``raw insert``: the same content INSERTed into ``agent_files`` by psycopg on one connection as
  ``hango_app`` with the tenant set (autocommit: one statement, one round trip);
- ``api read`` / ``raw select``: the same files read back;
- ``http floor``: a request refused with 401 before any database work (HTTP and routing alone).

Run: ``.venv/bin/python bench/files_api.py [--n 200] [--size 1024]``. A benchmark, not a test:
it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import httpx
import psycopg

from hango.agents import create_tenant, create_token, drop_tenant, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database


def timed(n: int, op: Callable[[int], object], warmup: int = 20) -> list[float]:
    for i in range(warmup):
        op(n + i)
    samples = []
    for i in range(n):
        start = time.perf_counter()
        op(i)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="timed operations of each kind")
    parser.add_argument("--size", type=int, default=1024, help="file size in bytes")
    args = parser.parse_args()

    db = Database()
    tenant = create_tenant(db, "bench-" + uuid.uuid4().hex[:10])
    try:
        save_agent(db, tenant, "api")
        save_agent(db, tenant, "raw")
        token = create_token(db, tenant, "owner", label="bench")
        text = ("hango " * (args.size // 6 + 1))[: args.size]
        data = text.encode()
        base_url, stop = serve_in_thread(create_app(db))
        client = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"})
        anonymous = httpx.Client(base_url=base_url)
        raw = psycopg.connect(db.app_conninfo, autocommit=True)
        if not db.embedded:
            raw.execute("SET ROLE hango_app")
        raw.execute("SELECT set_config('hango.tenant_id', %s, false)", [tenant])

        def api_write(i: int) -> None:
            r = client.put(f"/v1/agents/api/files/bench/f{i}.md", content=data,
                           headers={"Content-Type": "text/plain; charset=utf-8"})
            assert r.status_code == 201, r.text

        def api_read(i: int) -> None:
            r = client.get(f"/v1/agents/api/files/bench/f{i}.md")
            assert r.status_code == 200 and len(r.content) == len(data)

        def raw_insert(i: int) -> None:
            raw.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                        " VALUES (%s, 'raw', %s, %s, %s)",
                        [tenant, f"/bench/f{i}.md", data, len(data)])

        def raw_select(i: int) -> None:
            row = raw.execute("SELECT content, version FROM agent_files WHERE tenant_id = %s"
                              " AND agent_id = 'raw' AND path = %s",
                              [tenant, f"/bench/f{i}.md"]).fetchone()
            assert row is not None and len(row[0]) == len(data)

        def floor(i: int) -> None:
            assert anonymous.get("/v1/agents").status_code == 401

        results = {
            "api write": timed(args.n, api_write),
            "raw insert": timed(args.n, raw_insert),
            "api read": timed(args.n, api_read),
            "raw select": timed(args.n, raw_select),
            "http floor": timed(args.n, floor),
        }
        client.close()
        anonymous.close()
        raw.close()
        stop()
    finally:
        drop_tenant(db, tenant)
        db.close()

    p50 = {name: statistics.median(s) for name, s in results.items()}
    where = "embedded" if db.embedded else "external"
    print(f"files API vs raw psycopg: N={args.n} each, {args.size}-byte files, {where} "
          "PostgreSQL, loopback HTTP (uvicorn in a thread), one process")
    print(f"{'':12} {'p50 ms':>8} {'p90 ms':>8} {'mean ms':>8}")
    for name, samples in results.items():
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"{name:12} {p50[name]:8.3f} {p90:8.3f} {statistics.fmean(samples):8.3f}")
    print(f"write: api/raw = {p50['api write'] / p50['raw insert']:.1f}x   "
          f"read: api/raw = {p50['api read'] / p50['raw select']:.1f}x   "
          f"(http floor is {p50['http floor']:.3f} ms of each api call)")


if __name__ == "__main__":
    main()
