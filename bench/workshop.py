"""A workshop's load: N learners at once, each looping PUT memory + GET it + a run of their agent.

One process: the files API served by uvicorn in a thread (real HTTP on loopback), and one thread
per learner with its own owner token (``hango workshop provision``). Each loop writes
``/memories/AGENTS.md`` with a fresh nonce over HTTP, reads it back over HTTP, then runs the
learner's agent in-process (``Agent.run`` with the offline ``SimulatedModel``: before_run, one
model call). An error is any non-2xx answer, an exception, or a run whose prompt does not hold the
nonce just written (the memory must be fresh in the very next run).

Prints runs/s over the whole workshop, and p50/p99 of each step and of the whole loop, with the
machine's load. ``--before`` runs the same loop against code without the change-counter cache by
pointing ``PYTHONPATH`` at an older checkout (see bench/README.md).

Run: ``.venv/bin/python bench/workshop.py [--learners 30] [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from collections import defaultdict

import httpx

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, create_token, drop_tenant, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.models.simulated import SimulatedModel

SKILLS = 20  # each learner's agent has a few skills, as in a course notebook


def loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def seats(db: Database, learners: int, prefix: str) -> list[tuple[str, str]]:
    """(tenant, owner token) per learner: the provisioning command when this code has it."""
    try:
        from hango.workshop import provision
    except ImportError:  # older code: one call per object
        out = []
        for i in range(1, learners + 1):
            tenant = create_tenant(db, f"{prefix}-{i:02d}")
            save_agent(db, tenant, "a1", AgentConfig())
            out.append((tenant, create_token(db, tenant, "owner")))
        return out
    return [(s.tenant, s.token) for s in provision(db, learners, prefix=prefix)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    load_before = loadavg()
    db = Database()
    prefix = "ws-" + uuid.uuid4().hex[:6]
    learners = seats(db, args.learners, prefix)
    base_url, stop = serve_in_thread(create_app(db))
    samples: dict[str, list[float]] = defaultdict(list)
    errors: list[str] = []
    lock = threading.Lock()
    go = threading.Event()
    deadline = [0.0]

    def learner(tenant: str, token: str) -> None:
        agent = Agent(db, tenant, "a1", SimulatedModel(policy=lambda request: "done"))
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                          timeout=30) as http:
            for i in range(SKILLS):
                http.put(f"/v1/agents/a1/files/skills/s{i:02d}/SKILL.md",
                         content=f"---\nname: s{i:02d}\ndescription: skill {i}\n---\nbody\n")
            go.wait()
            while time.perf_counter() < deadline[0]:
                nonce = uuid.uuid4().hex
                mine: dict[str, float] = {}
                try:
                    start = time.perf_counter()
                    r = http.put("/v1/agents/a1/files/memories/AGENTS.md",
                                 content=f"- remember {nonce}\n".encode(),
                                 headers={"Content-Type": "text/plain; charset=utf-8"})
                    mine["put"] = time.perf_counter() - start
                    assert r.status_code in (200, 201), r.text
                    t = time.perf_counter()
                    r = http.get("/v1/agents/a1/files/memories/AGENTS.md")
                    mine["get"] = time.perf_counter() - t
                    assert r.status_code == 200 and nonce in r.text, r.text
                    t = time.perf_counter()
                    agent.model = SimulatedModel(policy=lambda request: "done")
                    result = agent.run("hello")
                    mine["run"] = time.perf_counter() - t
                    mine["loop"] = time.perf_counter() - start
                    prompt = "".join(b.text for b in result.requests[0].system)
                    assert nonce in prompt and result.skills_count == SKILLS, "stale run"
                except Exception as exc:
                    with lock:
                        errors.append(f"{tenant}: {exc!r}"[:200])
                    continue
                with lock:
                    for key, value in mine.items():
                        samples[key].append(value)

    threads = [threading.Thread(target=learner, args=seat, daemon=True) for seat in learners]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # let every learner write its skills
    started = time.perf_counter()
    deadline[0] = started + args.seconds
    go.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    stop()
    for tenant, _ in learners:
        drop_tenant(db, tenant)
    db.close()

    runs = len(samples["run"])
    print(f"workshop: {args.learners} learners x (PUT memory + GET it + a run), "
          f"{args.seconds:.0f} s, one process, pid {os.getpid()}")
    print(f"load before/after: {load_before} / {loadavg()}; {os.cpu_count()} CPUs")
    print(f"  runs/s {runs / elapsed:8.1f}   loops {runs}   errors {len(errors)}")
    print(f"  {'':6} {'p50 ms':>9} {'p99 ms':>9}")
    for key in ("put", "get", "run", "loop"):
        xs = sorted(samples[key]) or [float("nan")]
        p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
        print(f"  {key:6} {statistics.median(xs) * 1e3:9.2f} {p99 * 1e3:9.2f}")
    for line in errors[:5]:
        print(f"  error: {line}")


if __name__ == "__main__":
    main()
