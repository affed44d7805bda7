"""A workshop's load: N learners at once, each looping PUT memory + GET it + a run of their agent.

Each learner is a thread of this process with its own owner token (``hango workshop provision``)
and its own HTTP connection. Each loop writes ``/memories/AGENTS.md`` with a fresh nonce over
HTTP, reads it back over HTTP, then runs the learner's agent (before_run, one model call of the
offline simulator). An error is any non-2xx answer, an exception, or a run that did not read the
memory just written.

- By default the run is ``POST /v1/agents/a1/runs`` too, and the server is
  a real ``hango serve --workers N`` in its own processes. The answer does not carry the prompt,
  so the memory carries a version number in its length: version ``v`` is ``4 v`` bytes longer
  than version 0, the simulator counts ``ceil(bytes / 4)`` tokens, so the run's first request
  is exactly ``v`` tokens longer than the learner's calibration run (version 0, before the clock
  starts). Versions are unique across the workshop (``loop x learners + learner``), so a run
  that read an older version, or another learner's, is off by at least one token: an error.
- ``--in-process`` is the loop as it was before the runs endpoint existed: the files API served
  by uvicorn in a thread of this process, and ``Agent.run`` in this process; the check is the
  nonce in the run's prompt. Pointing ``PYTHONPATH`` at an older checkout runs it on that code
  (bench/README.md), so before and after can be run in turns on one machine.

Prints runs/s, p50/p99 of each step and of the whole loop, the CPU time of this process, of the
server's processes and of PostgreSQL per loop, and the machine's load.

``--each N`` instead sends N requests of each kind in a row from one learner and prints the CPU
each costs the server and PostgreSQL.

``--baseline DIR`` runs another checkout's ``hango serve`` (``DIR``, a checkout or a ``git
archive`` of one) and this code's in turns, and prints the ratios per round. Each side has an
embedded database of its own (two data directories on this machine), its learners provisioned
by its own code (``hango workshop provision``): an older hango refuses a newer schema, or
re-applies its own over it.

Run: ``.venv/bin/python bench/workshop.py [--learners 30] [--seconds 20] [--workers 3]
[--in-process | --each 300 | --baseline DIR [--rounds 2]]``.
"""

from __future__ import annotations

import argparse
import csv
import http.client
import io
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SKILLS = 20  # each learner's agent has a few skills, as in a course notebook
TICKS = os.sysconf("SC_CLK_TCK")


def loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (those that exist)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def children(pid: int) -> list[int]:
    """``pid`` and its child processes (a server's workers, a postmaster's backends)."""
    out = [pid]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return out


def postmaster_pid(data_dir: Path | None) -> int | None:
    """The postmaster of the embedded server in ``data_dir`` (its CPU is counted); ``None`` for
    an external one."""
    if data_dir is None or not (pidfile := data_dir / "pgdata" / "postmaster.pid").exists():
        return None
    return int(pidfile.read_text().split()[0])


def seats(db: object, learners: int, prefix: str) -> list[tuple[str, str]]:
    """(tenant, owner token) per learner: the provisioning command when this code has it."""
    try:
        from hango.workshop import provision
    except ImportError:  # older code: one call per object
        from hango.agents import AgentConfig, create_tenant, create_token, save_agent
        out = []
        for i in range(1, learners + 1):
            tenant = create_tenant(db, f"{prefix}-{i:02d}")  # type: ignore[arg-type]
            save_agent(db, tenant, "a1", AgentConfig())  # type: ignore[arg-type]
            out.append((tenant, create_token(db, tenant, "owner")))  # type: ignore[arg-type]
        return out
    provisioned = provision(db, learners, prefix=prefix, agent="a1")  # type: ignore[arg-type]
    return [(s.tenant, s.token) for s in getattr(provisioned, "seats", provisioned)]


def memory(nonce: str, version: int) -> bytes:
    """The memory file of one loop: the nonce, and ``4 * version`` bytes that count its version
    (within HANGO_MEMORY_MAX_BYTES, 64 KiB, while there are fewer than about 16,000 loops)."""
    return f"- remember {nonce}\n{'....' * version}\n".encode()


def prompt_tokens(run: dict[str, object]) -> int:
    """Every token of the run's first request: uncached, written to the cache, read from it."""
    usage = run["usage"][0]  # type: ignore[index]
    return int(usage["input_tokens"] + usage["cache_creation_input_tokens"]  # type: ignore[index]
               + usage["cache_read_input_tokens"])  # type: ignore[index]


class Client:
    """One learner's keep-alive HTTP connection (``http.client``: the lightest client at hand,
    since the learners share this machine with the server; a workshop's are on laptops)."""

    def __init__(self, base_url: str, token: str) -> None:
        host, _, port = base_url.removeprefix("http://").partition(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.headers = {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, body: bytes | None = None,
             content_type: str = "text/plain; charset=utf-8") -> tuple[int, str]:
        headers = self.headers if body is None else {**self.headers, "Content-Type": content_type}
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        return response.status, response.read().decode()

    def close(self) -> None:
        """Drop the connection (the next call opens a new one): the server closes idle ones."""
        self.conn.close()


# --- the server: `hango serve --workers N` in its own processes, or uvicorn in a thread --------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(checkout: str | None = None, data_dir: Path | None = None) -> dict[str, str]:
    """The server's environment: ``checkout`` first on its path (``--baseline``), and -P
    (Python 3.11) for it and its workers, since ``python -m`` would put the working directory
    first, and from this checkout that is this checkout's hango; ``data_dir`` its embedded
    database's ``HANGO_DATA_DIR``."""
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, env.get("PYTHONPATH")]))
    if data_dir is not None:
        env["HANGO_DATA_DIR"] = str(data_dir)
    return env


def hango_of(checkout: str | None = None) -> str:
    """Where the server imports hango from."""
    return subprocess.run([sys.executable, "-c", "import hango; print(hango.__file__)"],
                          env=server_env(checkout), capture_output=True, text=True,
                          check=True).stdout.strip()


@contextmanager
def hango_serve(workers: int, token: str, checkout: str | None = None,
                data_dir: Path | None = None) -> Iterator[tuple[str, list[int]]]:
    """``hango serve --workers N`` on a free port, on ``checkout``'s code (``--baseline``) or
    this one's, on ``data_dir``'s database or the default; yields its URL and its process ids."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "hango.cli", "serve", "--port", str(port), "--workers",
         str(workers), "--log-level", "warning"], env=server_env(checkout, data_dir))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # every worker answers once this has had answers from N distinct processes
            if server.poll() is not None:
                raise RuntimeError(f"hango serve exited with {server.returncode}")
            try:
                probe = Client(url, token)
                probe.call("GET", "/v1/agents/a1/files/memories/")
                probe.close()
                if len(children(server.pid)) > workers or workers == 1:
                    break  # N workers and multiprocessing's resource tracker
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("hango serve did not answer within 60 s")
            time.sleep(0.2)
        time.sleep(0.5 * workers)  # the other workers finish importing
        yield url, children(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# --- the loop ----------------------------------------------------------------------------------

Run = Callable[[Client, str, int], None]  # (http, nonce, version): raises if stale
MEMORY = "/v1/agents/a1/files/memories/AGENTS.md"


def workshop(base_url: str, learners: list[tuple[str, str]], seconds: float,
             setup: Callable[[int, Client], Run], meter: Callable[[], list[float]],
             ) -> tuple[dict[str, list[float]], list[str], float, list[float]]:
    """Every learner loops until ``seconds`` have passed; returns samples, errors, elapsed, and
    what ``meter`` (CPU seconds) counted over the timed window alone."""
    samples: dict[str, list[float]] = defaultdict(list)
    errors: list[str] = []
    lock = threading.Lock()
    ready = threading.Barrier(len(learners) + 1)
    go = threading.Event()
    deadline = [0.0]

    def learner(index: int, tenant: str, token: str) -> None:
        http = Client(base_url, token)
        try:
            for i in range(SKILLS):
                status, text = http.call(
                    "PUT", f"/v1/agents/a1/files/skills/s{i:02d}/SKILL.md",
                    f"---\nname: s{i:02d}\ndescription: skill {i}\n---\nbody\n".encode())
                assert status in (200, 201), text
            run = setup(index, http)
        except Exception as exc:
            with lock:
                errors.append(f"{tenant} setup: {exc!r}"[:300])
            ready.wait()
            return
        ready.wait()
        go.wait()
        http.close()  # the wait may have outlasted the server's keep-alive
        loop = 0
        while time.perf_counter() < deadline[0]:
            loop += 1
            nonce = uuid.uuid4().hex
            version = loop * len(learners) + index
            mine: dict[str, float] = {}
            try:
                start = time.perf_counter()
                status, text = http.call("PUT", MEMORY, memory(nonce, version))
                mine["put"] = time.perf_counter() - start
                assert status in (200, 201), text
                t = time.perf_counter()
                status, text = http.call("GET", MEMORY)
                mine["get"] = time.perf_counter() - t
                assert status == 200 and nonce in text, text
                t = time.perf_counter()
                run(http, nonce, version)
                mine["run"] = time.perf_counter() - t
                mine["loop"] = time.perf_counter() - start
            except Exception as exc:
                http.close()
                with lock:
                    errors.append(f"{tenant}: {exc!r}"[:300])
                continue
            with lock:
                for key, value in mine.items():
                    samples[key].append(value)
        http.close()

    threads = [threading.Thread(target=learner, args=(i, *seat), daemon=True)
               for i, seat in enumerate(learners)]
    for thread in threads:
        thread.start()
    ready.wait()  # every learner has written its skills and calibrated
    counted = meter()
    started = time.perf_counter()
    deadline[0] = started + seconds
    go.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return samples, errors, elapsed, [b - a for a, b in zip(counted, meter(), strict=True)]


def over_http(http: Client) -> Run:
    """The run over HTTP; a calibration run (version 0) first gives this learner's base."""
    def run(http: Client, nonce: str, version: int) -> dict[str, object]:
        status, text = http.call("POST", "/v1/agents/a1/runs", b'{"prompt": "hello"}',
                                 "application/json")
        out: dict[str, object] = json.loads(text)
        assert status == 201 and out["status"] == "done", text
        return out

    status, text = http.call("PUT", MEMORY, memory(uuid.uuid4().hex, 0))
    assert status in (200, 201), text
    base = prompt_tokens(run(http, "", 0))  # a nonce is always 32 hex digits

    def checked(http: Client, nonce: str, version: int) -> None:
        seen = prompt_tokens(run(http, nonce, version)) - base
        assert seen == version, f"stale run: read memory version {seen}, wrote {version}"

    return checked


def in_process(db: object, tenant_of: list[str]) -> Callable[[int, Client], Run]:
    from hango.agent.runtime import Agent
    from hango.models.simulated import SimulatedModel
    from hango.perf import cached_stack

    def setup(index: int, http: Client) -> Run:
        agent = Agent(db, tenant_of[index], "a1",  # type: ignore[arg-type]
                      SimulatedModel(policy=lambda request: "done"), stack=cached_stack)

        def run(http: Client, nonce: str, version: int) -> None:
            agent.model = SimulatedModel(policy=lambda request: "done")
            result = agent.run("hello")
            prompt = "".join(b.text for b in result.requests[0].system)
            assert nonce in prompt and result.skills_count == SKILLS, "stale run"

        return run

    return setup


def each_request(learner: tuple[str, str], n: int, postgres: int | None) -> None:
    """One learner, one request at a time, against ``hango serve --workers 1``: the CPU each
    kind of request costs the server and PostgreSQL (what the loop's figures are made of)."""
    with hango_serve(1, learner[1]) as (url, server_pids):
        http = Client(url, learner[1])
        for i in range(SKILLS):
            http.call("PUT", f"/v1/agents/a1/files/skills/s{i:02d}/SKILL.md",
                      f"---\nname: s{i:02d}\ndescription: skill {i}\n---\nbody\n".encode())
        run = ("POST", "/v1/agents/a1/runs", b'{"prompt": "hello"}', "application/json")
        kinds: list[tuple[str, Callable[[int], object]]] = [
            ("404, no route, no token", lambda i: http.call("GET", "/nothing")),
            ("PUT memory", lambda i: http.call("PUT", MEMORY, memory(uuid.uuid4().hex, i))),
            ("GET memory", lambda i: http.call("GET", MEMORY)),
            ("POST run, memory unchanged", lambda i: http.call(*run)),
            ("PUT memory + POST run", lambda i: (
                http.call("PUT", MEMORY, memory(uuid.uuid4().hex, i)), http.call(*run))),
            ("POST run, agent missing (404)",
             lambda i: http.call("POST", "/v1/agents/nobody/runs", *run[2:])),
        ]
        print(f"CPU ms per request, {n} in a row, one learner, hango serve --workers 1")
        print(f"  {'request':32} {'server':>7} {'postgres':>9} {'wall':>7}")
        for name, call in kinds:
            for i in range(20):  # warm: prepared statements, the agent's snapshot
                call(i)
            backends = children(postgres) if postgres else []
            before = (cpu_seconds(server_pids), cpu_seconds(backends), time.perf_counter())
            for i in range(n):
                call(i)
            after = (cpu_seconds(server_pids), cpu_seconds(backends), time.perf_counter())
            per = [(b - a) * 1e3 / n for a, b in zip(before, after, strict=True)]
            print(f"  {name:32} {per[0]:7.2f} {per[1]:9.2f} {per[2]:7.2f}")
        http.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=3,
                        help="hango serve --workers (not with --in-process)")
    parser.add_argument("--in-process", action="store_true",
                        help="the loop before the runs endpoint: server thread + Agent.run here")
    parser.add_argument("--each", type=int, metavar="N",
                        help="instead: N requests of each kind in a row, CPU per request")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another checkout (or its `git archive`): its hango serve and this "
                        "code's, in turns, each on a database of its own")
    parser.add_argument("--rounds", type=int, default=2,
                        help="with --baseline: rounds of (this, baseline), the order swapped "
                        "every other round")
    args = parser.parse_args()
    from hango.agents import drop_tenant
    from hango.db import Database

    if args.baseline:
        compare(args)
        return
    load_before = loadavg()
    db = Database()
    prefix = "ws-" + uuid.uuid4().hex[:6]
    learners = seats(db, args.learners, prefix)
    postgres = postmaster_pid(db.data_dir if getattr(db, "embedded", False) else None)
    try:
        if args.each:
            each_request(learners[0], args.each, postgres)
            return
        if args.in_process:
            from hango.api.app import create_app, serve_in_thread

            base_url, stop = serve_in_thread(create_app(db))
            where = "one process: the files API in a thread, Agent.run in-process"
            server_pids: list[int] = []
            setup = in_process(db, [t for t, _ in learners])
        else:
            serving = hango_serve(args.workers, learners[0][1])
            base_url, server_pids = serving.__enter__()
            stop = lambda: serving.__exit__(None, None, None)  # noqa: E731
            where = f"runs over HTTP, hango serve --workers {args.workers}"

            def setup(index: int, http: Client) -> Run:
                return over_http(http)
        def meter() -> list[float]:
            backends = children(postgres) if postgres else []  # a backend per connection
            return [cpu_seconds([os.getpid()]), cpu_seconds(server_pids), cpu_seconds(backends)]

        samples, errors, elapsed, spent = workshop(base_url, learners, args.seconds, setup, meter)
        stop()
    finally:
        for tenant, _ in learners:
            drop_tenant(db, tenant)
        db.close()

    runs = len(samples["run"])
    print(f"workshop: {args.learners} learners x (PUT memory + GET it + a run), "
          f"{args.seconds:.0f} s, {where}")
    print(f"load before/after: {load_before} / {loadavg()}; {os.cpu_count()} CPUs; "
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC")
    print(f"  runs/s {runs / elapsed:8.1f}   loops {runs}   errors {len(errors)}")
    per = 1e3 / max(runs, 1)
    print(f"  CPU ms per loop: bench {spent[0] * per:.2f}, server {spent[1] * per:.2f}, "
          f"postgres {spent[2] * per:.2f}" + ("" if postgres else " (external: not counted)"))
    print(f"  {'':6} {'p50 ms':>9} {'p99 ms':>9}")
    for key in ("put", "get", "run", "loop"):
        xs = sorted(samples[key]) or [float("nan")]
        p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
        print(f"  {key:6} {statistics.median(xs) * 1e3:9.2f} {p99 * 1e3:9.2f}")
    for line in errors[:5]:
        print(f"  error: {line}")


@dataclass(frozen=True)
class Side:
    """One side of ``--baseline``: its code, its embedded database and its learners."""

    name: str
    checkout: str | None  # None: this code
    data_dir: Path
    seats: list[tuple[str, str]]  # (tenant, owner token)
    postgres: int | None  # its postmaster (its backends' CPU is counted)


@contextmanager
def own_database(name: str, checkout: str | None, learners: int, root: Path) -> Iterator[Side]:
    """A side's embedded PostgreSQL in ``root/name``, running while this process holds it; its
    schema and its learners made by the side's own code (``hango workshop provision``)."""
    from hango.embedded import EmbeddedServer, stop

    data_dir = root / name
    EmbeddedServer.get(data_dir)  # a new cluster, started (the same PostgreSQL for both sides)
    try:
        made = subprocess.run(
            [sys.executable, "-m", "hango.cli", "workshop", "provision", "--learners",
             str(learners), "--prefix", "ws", "--agent", "a1"],
            env=server_env(checkout, data_dir), capture_output=True, text=True)
        if made.returncode != 0:
            raise SystemExit(f"{name}: hango workshop provision failed:\n{made.stderr[-3000:]}")
        seats = [(row["tenant"], row["token"]) for row in csv.DictReader(io.StringIO(made.stdout))]
        yield Side(name, checkout, data_dir, seats, postmaster_pid(data_dir))
    finally:
        stop(data_dir / "pgdata")


def compare(args: argparse.Namespace) -> None:
    """``--baseline``: this code's ``hango serve`` and the baseline's, in turns (ABBA...), each on
    its own database with as many learners; a line per run, then this code against the
    baseline. The learners' threads are the same code (this process) for both."""
    if os.environ.get("HANGO_DATABASE_URL"):
        raise SystemExit("--baseline gives each side an embedded database of its own: "
                         "unset HANGO_DATABASE_URL")
    if hango_of() == hango_of(args.baseline):
        raise SystemExit("--baseline imports the same hango as this code: see bench/README.md")
    root = Path(tempfile.mkdtemp(prefix="hango-workshop-"))
    try:
        with own_database("this", None, args.learners, root) as this, \
                own_database("baseline", args.baseline, args.learners, root) as baseline:
            print(f"workshop: {args.learners} learners x (PUT memory + GET it + a run), "
                  f"{args.seconds:.0f} s a run, hango serve --workers {args.workers}, in turns:")
            for side in (this, baseline):
                print(f"  {side.name:9} hango {hango_of(side.checkout)}, database "
                      f"{side.data_dir} (postmaster {side.postgres}), {len(side.seats)} learners")
            rounds(args, this, baseline)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def rounds(args: argparse.Namespace, this: Side, baseline: Side) -> None:
    print(f"  {'run':9} {'UTC':8} {'load before':>17} {'runs/s':>7} {'errors':>6} "
          f"{'CPU ms/loop: server':>19} {'postgres':>8} {'run p50':>8} {'run p99':>8} {'loop p99':>8}")
    figures: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    errors_seen: list[str] = []
    for r in range(args.rounds):
        for side in ((this, baseline) if r % 2 == 0 else (baseline, this)):
            load = " ".join(loadavg())
            with hango_serve(args.workers, side.seats[0][1], side.checkout,
                             side.data_dir) as (url, server_pids):
                def meter(pids: list[int] = server_pids, pg: int | None = side.postgres
                          ) -> list[float]:
                    return [cpu_seconds(pids), cpu_seconds(children(pg) if pg else [])]

                samples, errors, elapsed, spent = workshop(
                    url, side.seats, args.seconds, lambda index, http: over_http(http), meter)
            runs = len(samples["run"])
            run = sorted(samples["run"]) or [float("nan")]
            loop = sorted(samples["loop"]) or [float("nan")]
            p99 = run[min(len(run) - 1, int(len(run) * 0.99))]
            loop99 = loop[min(len(loop) - 1, int(len(loop) * 0.99))]
            figures[side.name].append((runs / elapsed, p99, loop99))
            errors_seen += errors
            print(f"  {side.name:9} {time.strftime('%H:%M:%S', time.gmtime())} {load:>17} "
                  f"{runs / elapsed:7.1f} {len(errors):6} {spent[0] * 1e3 / max(runs, 1):19.2f} "
                  f"{spent[1] * 1e3 / max(runs, 1):8.2f} "
                  f"{statistics.median(run) * 1e3:8.1f} {p99 * 1e3:8.1f} {loop99 * 1e3:8.1f}",
                  flush=True)
    for line in errors_seen[:5]:
        print(f"  error: {line}")
    print("this / baseline, per round (runs/s; p99 of a run and of a loop, baseline / this):")
    for a, b in zip(figures["this"], figures["baseline"], strict=True):
        print(f"  runs/s {a[0] / max(b[0], 1e-9):.2f}x   run p99 {b[1] / a[1]:.2f}x   "
              f"loop p99 {b[2] / a[2]:.2f}x")
    print(f"  errors {len(errors_seen)}; load after {' '.join(loadavg())}")


if __name__ == "__main__":
    main()
