"""What does the files API cost over the database itself? GET p50 next to raw psycopg, and why.

In one process and one run, on the same PostgreSQL server and the same table. Every GET reads a
1 KiB file; the rows are timed **in turns** (each round runs every row once, in the order
below), so that load from other processes lands on all of them alike:

- ``raw select``: the file's row through psycopg on one connection as ``hango_app`` with the
  tenant set, in autocommit: one statement, one round trip. The baseline;
- ``db statement``: what the API's GET asks of the database, called in-process: a pooled
  connection, ``hango_read_file`` (the token and the file in one statement), the decode (the
  API runs it on its event loop, ``Database.statement_async``; here it runs on the caller's);
- ``GET, hango client``: ``FilesClient.read`` (``http.client``, keep-alive), as a user's code
  reads a file;
- ``GET, socket client``: the same request from a plain-socket keep-alive client, which costs
  next to nothing: the server's own cost;
- ``GET via route``: the same GET with a query string, which the plain-GET path leaves to the
  FastAPI route: the token and the file in two transactions, as every GET was before the plain GET;
- ``401, no token``: refused before any database work;
- what the floor is made of, on the same uvicorn (httptools + uvloop when installed): ``bare
  asgi``, a 10-line ASGI app answering 200 (socket client, and through httpx), and ``+ thread
  hop``, the same app handing one no-op to a worker thread, as the API's routes do for their
  statements (the plain GET no longer does).

Protocol round trips per GET are counted from a libpq trace, not guessed. Each row also gives
CPU time per operation (the whole process's, client and server threads): on a shared machine,
wall time includes waiting for a core; CPU time is what the code costs. Then the baseline and
the two GETs again, each ``--rounds`` times back to back: there the raw select's server process
stays awake between statements, its best case, so the ratios are stricter. ``api write`` and
``raw insert`` (a PUT of each file, an INSERT) run first, one after the other.

Run: ``.venv/bin/python bench/files_api.py [--rounds 300] [--size 1024]``. A benchmark, not a
test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
from starlette.concurrency import run_in_threadpool

from hango.agents import create_tenant, create_token, drop_tenant, save_agent, token_digest
from hango.api.app import create_app, serve_in_thread
from hango.api.client import FilesClient
from hango.api.plain_get import found_file, read_row
from hango.db import Database


class TracedDatabase(Database):
    """A :class:`Database` that keeps its pooled connections, to trace them with libpq."""

    def __init__(self) -> None:
        self.connections: list[psycopg.Connection[Any] | psycopg.AsyncConnection[Any]] = []
        super().__init__()

    def _check(self, conn: psycopg.Connection[Any]) -> None:  # each time one is handed out
        super()._check(conn)
        if conn not in self.connections:
            self.connections.append(conn)

    async def _check_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await super()._check_async(conn)
        if conn not in self.connections:
            self.connections.append(conn)

    def round_trips(self, op: Callable[[], object], n: int = 20) -> float:
        """Protocol round trips per call of ``op``: messages that wait for ReadyForQuery."""
        with tempfile.TemporaryFile("w+") as trace:
            live = [c for c in self.connections if not c.closed]
            for conn in live:
                conn.pgconn.trace(trace.fileno())
            for _ in range(n):
                op()
            for conn in live:
                conn.pgconn.untrace()
            trace.seek(0)
            sent = [line.split("\t") for line in trace if "\tF\t" in line]
        return sum(1 for f in sent if f[3].split()[0] in ("Sync", "Query")) / n


async def bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least an ASGI app can do: 200, two bytes."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/hop":
        await run_in_threadpool(lambda: None)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


class SocketClient:
    """A keep-alive HTTP/1.1 GET over a plain socket: a client that costs next to nothing, so
    that a row measures the server (httpx alone costs about as much CPU as a bare server)."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        host, port = base_url.removeprefix("http://").rsplit(":", 1)
        self.address = (host, int(port))
        auth = "" if token is None else f"Authorization: Bearer {token}\r\n"
        self.head = f"Host: {host}\r\n{auth}\r\n".encode()
        self.connect()

    def connect(self) -> None:
        self.sock = socket.create_connection(self.address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def get(self, path: str) -> tuple[int, bytes]:
        """One GET; a connection the server closed while idle (keep-alive timeout) is opened
        again and the request sent once more."""
        try:
            return self._get(path)
        except (EOFError, ConnectionError):
            self.close()
            self.connect()
            return self._get(path)

    def _get(self, path: str) -> tuple[int, bytes]:
        self.sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\n" + self.head)
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(self.buf) < length:
            self._recv()
        body, self.buf = self.buf[:length], self.buf[length:]
        return int(head.split(b" ", 2)[1]), body

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("the server closed the connection")
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def in_turns(rows: dict[str, Callable[[], object]], rounds: int,
             warmup: int = 30) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Wall ms of each call and CPU ms per call, every row once a round."""
    for _ in range(warmup):
        for op in rows.values():
            op()
    wall: dict[str, list[float]] = {name: [] for name in rows}
    cpu = dict.fromkeys(rows, 0.0)
    for _ in range(rounds):
        for name, op in rows.items():
            c, start = time.process_time(), time.perf_counter()
            op()
            wall[name].append((time.perf_counter() - start) * 1e3)
            cpu[name] += time.process_time() - c
    return wall, {name: total / rounds * 1e3 for name, total in cpu.items()}


def ignoring_index(op: Callable[[], object]) -> Callable[[int], object]:
    return lambda i: op()


def one_by_one(n: int, op: Callable[[int], object]) -> tuple[list[float], float]:
    samples, c = [], time.process_time()
    for i in range(n):
        start = time.perf_counter()
        op(i)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples, (time.process_time() - c) / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="timed rounds of the GET rows")
    parser.add_argument("--size", type=int, default=1024, help="file size in bytes")
    args = parser.parse_args()

    load = loadavg()
    db = TracedDatabase()
    tenant = create_tenant(db, "bench-" + uuid.uuid4().hex[:10])
    stops: list[Callable[[], None]] = []
    try:
        save_agent(db, tenant, "api")
        save_agent(db, tenant, "raw")
        token = create_token(db, tenant, "owner", label="bench")
        text = ("hango " * (args.size // 6 + 1))[: args.size]
        data = text.encode()
        base_url, stop = serve_in_thread(create_app(db))
        stops.append(stop)
        files = FilesClient(base_url, token, "api")
        raw = psycopg.connect(db.app_conninfo, autocommit=True)
        if not db.embedded:
            raw.execute("SET ROLE hango_app")
        raw.execute("SELECT set_config('hango.tenant_id', %s, false)", [tenant])

        def api_write(i: int) -> None:
            assert files.write(f"/bench/f{i}.md", text) == 1

        def raw_insert(i: int) -> None:
            raw.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                        " VALUES (%s, 'raw', %s, %s, %s)",
                        [tenant, f"/bench/f{i}.md", data, len(data)])

        writes = {"api write": one_by_one(args.rounds, api_write),
                  "raw insert": one_by_one(args.rounds, raw_insert)}

        path = "/bench/f0.md"
        url = "/v1/agents/api/files" + path
        lean, anonymous = SocketClient(base_url, token), SocketClient(base_url)
        bare_url, stop_bare = serve_in_thread(bare, lifespan="off")
        stops.append(stop_bare)
        bare_lean, bare_httpx = SocketClient(bare_url), httpx.Client(base_url=bare_url)
        cap = db.settings.max_file_bytes

        def raw_select() -> None:
            row = raw.execute("SELECT content, version FROM agent_files WHERE tenant_id = %s"
                              " AND agent_id = 'raw' AND path = %s", [tenant, path]).fetchone()
            assert row is not None and len(row[0]) == len(data)

        def db_statement() -> None:
            row = read_row(db, [token_digest(token), "api", path, cap])
            found = found_file(path, cap, row)[1]
            assert found is not None and len(found.content) == len(data)

        def hango_client() -> None:
            assert len(files.read(path)) == len(data)

        def socket_client() -> None:
            assert lean.get(url) == (200, data)

        def via_route() -> None:
            assert lean.get(url + "?via=route") == (200, data)

        def no_token() -> None:
            assert anonymous.get(url)[0] == 401

        rows: dict[str, Callable[[], object]] = {
            "raw select": raw_select,
            "db statement": db_statement,
            "GET, hango client": hango_client,
            "GET, socket client": socket_client,
            "GET via route": via_route,
            "401, no token": no_token,
            "bare asgi": lambda: bare_lean.get("/"),
            "+ thread hop": lambda: bare_lean.get("/hop"),
            "bare asgi, httpx": lambda: bare_httpx.get("/"),
        }
        wall, cpu = in_turns(rows, args.rounds)
        tight = {name: one_by_one(args.rounds, ignoring_index(op)) for name, op in rows.items()}
        trips = {name: db.round_trips(rows[name]) for name in  # warm: statements prepared
                 ("db statement", "GET, socket client", "GET via route", "401, no token")}
        for closing in (files, lean, anonymous, bare_lean, bare_httpx, raw):
            closing.close()
    finally:
        for stop in stops:
            stop()
        drop_tenant(db, tenant)
        db.close()

    where = "embedded" if db.embedded else "external"
    print(f"files API vs raw psycopg: {args.size}-byte files, {where} PostgreSQL, loopback HTTP "
          "(uvicorn in a thread), one process")
    print(f"load before/after: {load} / {loadavg()}; {os.cpu_count()} CPUs; "
          f"http={'httptools' if _has('httptools') else 'h11'}, "
          f"loop={'uvloop' if _has('uvloop') else 'asyncio'}")
    tables = {f"GET, {args.rounds} rounds in turns": (
                  {name: statistics.median(w) for name, w in wall.items()}, wall, cpu),
              f"the same, {args.rounds} back to back": (
                  {name: statistics.median(w) for name, (w, _) in tight.items()},
                  {name: w for name, (w, _) in tight.items()},
                  {name: c for name, (_, c) in tight.items()})}
    for title, (p50, samples, cost) in tables.items():
        print(f"\n{title:32} p50 ms   p90 ms   CPU ms   x raw  round trips")
        for name in rows:
            rt = f"{trips[name]:11.1f}" if name in trips else ""
            print(f"  {name:28} {p50[name]:8.3f} {p90(samples[name]):8.3f} {cost[name]:8.3f} "
                  f"{p50[name] / p50['raw select']:6.1f}x {rt}")
    print(f"\nwrites, {args.rounds} one by one{'':11} p50 ms   p90 ms   CPU ms")
    for name, (w, c) in writes.items():
        print(f"  {name:28} {statistics.median(w):8.3f} {p90(w):8.3f} {c:8.3f}")

    print("\nGET at concurrency 1, x raw psycopg (goal <= 10x):")
    for title, (p50, _, _) in tables.items():
        rest = p50["GET, socket client"] - p50["bare asgi"] - p50["db statement"]
        print(f"  {title.split(', ', 1)[1]}: hango client "
              f"{p50['GET, hango client'] / p50['raw select']:.1f}x, socket client "
              f"{p50['GET, socket client'] / p50['raw select']:.1f}x, via the route (as every GET was "
              f"before) {p50['GET via route'] / p50['raw select']:.1f}x; the socket GET's "
              f"{p50['GET, socket client']:.3f} ms = HTTP server and client "
              f"{p50['bare asgi']:.3f} + db statement "
              f"{p50['db statement']:.3f} + the rest {rest:.3f}; httpx adds "
              f"{p50['bare asgi, httpx'] - p50['bare asgi']:.3f}")


def p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10)[-1]


def loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def _has(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
