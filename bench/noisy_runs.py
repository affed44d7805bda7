"""Noisy neighbour, runs: tenant B's p99 while tenant A bursts slow runs, over B alone.

The sibling of ``bench/noisy_neighbour.py`` (listings), in one process and one run, on one
server (uvicorn in a thread, the real database behind it, default settings):

- the server's model answers at once, except a prompt containing "slow": that call takes
  ``--model-seconds`` (a provider taking its time);
- tenant B does, over and over, what a user does: a PUT of a small file, a listing, a run
  (a quick one); each request is one sample;
- ``alone``: B with nothing else running (measured first and again last);
- ``before``: ``--burst`` clients of tenant A each send one slow run to the route as it was
  before runs had their own threads (a plain ``def`` route on the shared worker threads, with
  no limit per tenant; rebuilt here beside the real one, so both run in the same process);
- ``after``: the same burst on the real route: A's runs beyond ``HANGO_TENANT_MAX_RUNS`` are 429,
  and those clients send again after ``Retry-After``, until each has had its run.

B's samples of a phase are taken while A's burst lasts. The figure is B's p99 under each load
divided by B's p99 alone. Run: ``.venv/bin/python bench/noisy_runs.py [--burst 80]
[--model-seconds 3]`` (about a minute at the defaults). A benchmark, not a test: it prints
figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from typing import Annotated

import httpx
from fastapi import Depends, FastAPI, Request
from noisy_neighbour import loadavg, p

from hango.agents import create_tenant, create_token, drop_tenant, save_agent
from hango.api import runs
from hango.api.app import create_app, serve_in_thread
from hango.api.deps import _Agent, _agent
from hango.db import Database
from hango.models import base
from hango.models.simulated import SimulatedModel
from hango.settings import load_settings


class SlowModel(SimulatedModel):
    """The simulator, but a prompt containing "slow" takes ``seconds`` to answer."""

    def __init__(self, seconds: float) -> None:
        super().__init__(history=1)
        self.seconds = seconds

    def complete(self, request: base.Request) -> base.Response:
        if "slow" in request.messages[-1].text:
            time.sleep(self.seconds)
        return super().complete(request)  # the simulator serves many threads


def add_before_route(app: FastAPI) -> None:
    """The run route as it was: a plain ``def``, so on the shared worker threads, unlimited."""
    def create_run(request: Request, agent: Annotated[_Agent, Depends(_agent)],
                   body: runs.RunBody) -> runs.RunOut:
        return runs._create_run(request, agent, body)

    app.add_api_route("/before/agents/{agent_id}/runs", create_run, methods=["POST"],
                      response_model=runs.RunOut, status_code=201)


def b_ops(client: httpx.Client, stop: threading.Event | None, n: int
          ) -> dict[str, list[float]]:
    """B's PUT, listing and run, in turn, ``n`` times or until ``stop``: milliseconds each."""
    samples: dict[str, list[float]] = {"put": [], "list": [], "run": []}
    for i in range(n):
        if stop is not None and stop.is_set():
            break
        for kind, send in (
                ("put", lambda i=i: client.put(f"/v1/agents/b/files/notes/{i % 5}.md",
                                               content=b"B's note")),
                ("list", lambda: client.get("/v1/agents/b/files", params={"dir": "/notes/"})),
                ("run", lambda: client.post("/v1/agents/b/runs", json={"prompt": "hello"}))):
            start = time.perf_counter()
            r = send()
            samples[kind].append((time.perf_counter() - start) * 1e3)
            assert r.is_success, r.text
    return samples


def burst(base_url: str, token_a: str, clients: int, path: str, client_b: httpx.Client,
          n: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """A's ``clients`` slow runs at once (each sent again after Retry-After on a 429) while B
    works; B's samples stop when A's burst is over."""
    over = threading.Event()
    counts = {"429": 0, "done": 0}
    lock = threading.Lock()
    started = threading.Barrier(clients + 1)

    def one() -> None:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token_a}"},
                          timeout=600) as c:
            started.wait()
            while True:
                r = c.post(path, json={"prompt": "slow, please"})
                if r.status_code != 429:
                    assert r.status_code == 201, r.text
                    with lock:
                        counts["done"] += 1
                    return
                with lock:
                    counts["429"] += 1
                time.sleep(float(r.headers["Retry-After"]))

    threads = [threading.Thread(target=one, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    began = time.perf_counter()
    started.wait()
    time.sleep(0.2)  # A's requests are in
    watcher = threading.Thread(target=lambda: ([t.join() for t in threads], over.set()))
    watcher.start()
    samples = b_ops(client_b, over, n)
    watcher.join()
    return samples, {"burst_s": time.perf_counter() - began, **counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=80, help="A's slow runs sent at once")
    parser.add_argument("--model-seconds", type=float, default=3.0,
                        help="how long the model takes over a slow run")
    parser.add_argument("--ops", type=int, default=30,
                        help="B's rounds (PUT, listing, run) alone, and at most under load")
    args = parser.parse_args()

    settings = load_settings(database_name="hango_bench")
    db = Database(settings)
    tenant_a = create_tenant(db, "bench-ra-" + uuid.uuid4().hex[:8])
    tenant_b = create_tenant(db, "bench-rb-" + uuid.uuid4().hex[:8])
    try:
        save_agent(db, tenant_a, "a")
        save_agent(db, tenant_b, "b")
        token_a = create_token(db, tenant_a, "member", label="bench")
        token_b = create_token(db, tenant_b, "owner", label="bench")
        app = create_app(db, settings)
        app.state.hango_model = SlowModel(args.model_seconds)
        add_before_route(app)
        base_url, stop = serve_in_thread(app)
        client_b = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token_b}"},
                                timeout=600)
        b_ops(client_b, None, 10)  # warm-up
        print(f"load before: {loadavg()}; A bursts {args.burst} runs of {args.model_seconds:g} s"
              f"; HANGO_TENANT_MAX_RUNS={settings.tenant_max_runs}, HANGO_RUN_THREADS="
              f"{settings.run_threads}; B: {args.ops} rounds of PUT, listing, run alone")
        alone_1 = b_ops(client_b, None, args.ops)
        before, before_a = burst(base_url, token_a, args.burst, "/before/agents/a/runs",
                                 client_b, args.ops)
        after, after_a = burst(base_url, token_a, args.burst, "/v1/agents/a/runs", client_b,
                               args.ops)
        alone_2 = b_ops(client_b, None, args.ops)
        load = loadavg()
        alone = {k: alone_1[k] + alone_2[k] for k in alone_1}
        every = [x for v in alone.values() for x in v]
        base99 = p(every, 0.99)
        print(f"{'phase':<36} {'requests':>8} {'p50 ms':>8} {'p99 ms':>9} {'p99/alone':>10}"
              f"   p99 ms of PUT / listing / run")
        for name, samples in (("B alone (first and last)", alone),
                              ("B during A's burst (before)", before),
                              ("B during A's burst (after)", after)):
            flat = [x for v in samples.values() for x in v]
            print(f"{name:<36} {len(flat):>8} {statistics.median(flat):>8.1f} "
                  f"{p(flat, 0.99):>9.1f} {p(flat, 0.99) / base99:>9.1f}x   "
                  + " / ".join(f"{p(samples[k], 0.99):.1f}" for k in ("put", "list", "run")))
        for name, a in (("before", before_a), ("after", after_a)):
            print(f"A {name}: burst over in {a['burst_s']:.1f} s, {a['done']:.0f} runs done, "
                  f"{a['429']:.0f} answers 429")
        print(f"load after: {load}")
        client_b.close()
        stop()
    finally:
        drop_tenant(db, tenant_a)
        drop_tenant(db, tenant_b)
        db.close()


if __name__ == "__main__":
    main()
