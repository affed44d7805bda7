"""What does the files API cost over the database itself? Write and read p50, next to raw psycopg.

In one process and one run, on the same PostgreSQL server and the same table:

- ``api write``: ``PUT /v1/agents/{agent}/files/{path}`` over real HTTP on loopback (uvicorn in a
  thread, httpx with keep-alive): token lookup, path rule, one INSERT, JSON reply;
- ``raw insert``: the same content INSERTed into ``agent_files`` by psycopg on one connection as
  ``hango_app`` with the tenant set (autocommit: one statement, one round trip);
- ``api read`` / ``raw select``: the same files read back;
- ``http floor``: a request refused with 401 before any database work (HTTP and routing alone);
- what that floor is made of: ``bare asgi`` is a 10-line ASGI app that answers 200 on the same
  uvicorn (httptools + uvloop when installed), ``bare h11`` the same app on uvicorn's pure-Python
  HTTP parser; the rest of the floor is FastAPI's routing, dependencies and error handling.

Each row also gives CPU time per operation (the whole process's, client and server threads):
on a shared machine, wall time includes waiting for a core; CPU time is what the code costs.

Run: ``.venv/bin/python bench/files_api.py [--n 200] [--size 1024]``. A benchmark, not a test:
it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import uvicorn

from hango.agents import create_tenant, create_token, drop_tenant, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database

CPU: dict[str, float] = {}


def timed(n: int, op: Callable[[int], object], warmup: int = 20) -> list[float]:
    for i in range(warmup):
        op(n + i)
    samples = []
    cpu = time.process_time()
    for i in range(n):
        start = time.perf_counter()
        op(i)
        samples.append((time.perf_counter() - start) * 1e3)
    CPU[getattr(op, "__name__", "?")] = (time.process_time() - cpu) / n * 1e3
    return samples


async def bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least an ASGI app can do: 200, two bytes."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def serve_bare(http: str) -> tuple[str, Callable[[], None]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(bare, http=http, log_level="warning",  # type: ignore[arg-type]
                                           access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.005)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="timed operations of each kind")
    parser.add_argument("--size", type=int, default=1024, help="file size in bytes")
    args = parser.parse_args()

    load = loadavg()
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

        lean = SocketClient(base_url, token)

        def api_read_lean(i: int) -> None:
            status, body = lean.get(f"/v1/agents/api/files/bench/f{i}.md")
            assert status == 200 and len(body) == len(data)

        bare_urls = {http: serve_bare(http) for http in ("auto", "h11")}
        bare_clients = {http: httpx.Client(base_url=url) for http, (url, _) in bare_urls.items()}

        def bare_asgi(i: int) -> None:
            assert bare_clients["auto"].get("/").status_code == 200

        def bare_h11(i: int) -> None:
            assert bare_clients["h11"].get("/").status_code == 200

        results = {
            "api write": timed(args.n, api_write),
            "raw insert": timed(args.n, raw_insert),
            "api read": timed(args.n, api_read),
            "raw select": timed(args.n, raw_select),
            "api read*": timed(args.n, api_read_lean),
            "http floor": timed(args.n, floor),
            "bare asgi": timed(args.n, bare_asgi),
            "bare h11": timed(args.n, bare_h11),
        }
        for http, (_, stop_bare) in bare_urls.items():
            bare_clients[http].close()
            stop_bare()
        client.close()
        lean.close()
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
    print(f"load before/after: {load} / {loadavg()}; "
          f"{os.cpu_count()} CPUs; http={'httptools' if _has('httptools') else 'h11'}")
    print(f"{'':12} {'p50 ms':>8} {'p90 ms':>8} {'mean ms':>8} {'CPU ms':>8}")
    cpu = dict(zip(results, CPU.values(), strict=True))
    for name, samples in results.items():
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"{name:12} {p50[name]:8.3f} {p90:8.3f} {statistics.fmean(samples):8.3f} "
              f"{cpu[name]:8.3f}")
    print(f"write: api/raw = {p50['api write'] / p50['raw insert']:.1f}x   "
          f"read: api/raw = {p50['api read'] / p50['raw select']:.1f}x   "
          f"(http floor is {p50['http floor']:.3f} ms of each api call)")
    print("api read* = the same GET from a plain-socket client (the server's cost, not httpx's)")
    print(f"GET at concurrency 1: api/raw = {p50['api read'] / p50['raw select']:.1f}x wall "
          f"(goal <= 10x), {cpu['api read'] / cpu['raw select']:.1f}x CPU; with the plain-socket "
          f"client {p50['api read*'] / p50['raw select']:.1f}x wall, "
          f"{cpu['api read*'] / cpu['raw select']:.1f}x CPU; the floor: bare ASGI "
          f"{p50['bare asgi']:.3f} ms ({p50['bare h11']:.3f} on h11), FastAPI's 401 adds "
          f"{p50['http floor'] - p50['bare asgi']:.3f} ms")


def loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


class SocketClient:
    """A keep-alive HTTP/1.1 GET over a plain socket: a client that costs next to nothing, so
    that the row measures the server (httpx alone costs about as much CPU as a bare server)."""

    def __init__(self, base_url: str, token: str) -> None:
        host, port = base_url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = f"Host: {host}\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
        self.buf = b""

    def get(self, path: str) -> tuple[int, bytes]:
        self.sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\n" + self.head)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(self.buf) < length:
            self.buf += self.sock.recv(65536)
        body, self.buf = self.buf[:length], self.buf[length:]
        return int(head.split(b" ", 2)[1]), body

    def close(self) -> None:
        self.sock.close()


def _has(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
