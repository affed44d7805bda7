"""What keeping a served run's prompt view costs: its views as a binary or a text array.

``hango.api.runs.record`` keeps a run's row and the view of each of its model calls in one
round trip. The views (compact JSON, about 12 KB for a workshop learner's run) go to
PostgreSQL as a text array. Sent in the text format, psycopg escapes every quote and backslash
of each element in Python; in the binary format (``%b``, what ``prompts.INSERT_FIRST`` uses)
each element goes as it is. Both forms are timed here, alternated in this one process, on
the same agent: the workshop's learner (``hango workshop provision``'s agent, 20 skills, a
4 KB memory), a new run before each call, only ``record()`` timed: its wall time (with the
commit's flush) and this thread's CPU time (the Python side alone).

Run: ``.venv/bin/python bench/run_views.py [--n 300]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

from hango import prompts
from hango.agents import drop_tenant
from hango.api.runs import model_from_settings, record
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.perf import CachedAgent
from hango.settings import load_settings
from hango.workshop import provision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="record() calls of each form")
    args = parser.parse_args()
    db = Database(load_settings(database_name="hango_bench"))
    (seat,) = provision(db, 1, prefix=f"bench-views-{uuid.uuid4().hex[:6]}").seats
    try:
        fs = PostgresBackend(db, seat.tenant, seat.agent)
        for i in range(20):
            fs.write(f"/skills/s{i:02d}/SKILL.md",
                     f"---\nname: s{i:02d}\ndescription: skill {i}\n---\nbody\n")
        fs.write("/memories/AGENTS.md", f"- remember {uuid.uuid4().hex}\n{'....' * 1000}\n")
        agent = CachedAgent(db, seat.tenant, seat.agent, model_from_settings(db.settings))
        binary = prompts.INSERT_FIRST
        forms = {"binary array (%b)": binary,
                 "text array (%s)": binary.replace("%(views)b", "%(views)s")}
        assert len(set(forms.values())) == 2
        times: dict[str, list[float]] = {name: [] for name in forms}
        cpu: dict[str, list[float]] = {name: [] for name in forms}
        try:
            for i in range(args.n + 10):  # the first 10 of each warm up
                for name in (list(forms) if i % 2 else list(forms)[::-1]):
                    prompts.INSERT_FIRST = forms[name]
                    result = agent.run("hello")
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    record(agent, result, db.settings)
                    if i >= 10:
                        times[name].append(time.perf_counter() - start)
                        cpu[name].append(time.thread_time() - start_cpu)
        finally:
            prompts.INSERT_FIRST = binary
        view = prompts.first_params(seat.tenant, result, db.settings)["views"][0]
        print(f"record() of one run, {args.n} of each form alternated; one view of "
              f"{len(view.encode()):,} B with {view.count(chr(34)) + view.count(chr(92))} quotes "
              f"and backslashes; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"{time.strftime('%H:%M:%S', time.gmtime())} UTC")
        print(f"  {'':18} {'wall p50 ms':>11} {'wall mean':>10} {'CPU p50 ms':>11}")
        for name, xs in times.items():
            print(f"  {name:18} {statistics.median(xs) * 1e3:11.3f} "
                  f"{statistics.mean(xs) * 1e3:10.3f} {statistics.median(cpu[name]) * 1e3:11.3f}")
        (a, b), (c, d) = ([statistics.median(xs) for xs in m.values()] for m in (times, cpu))
        print(f"  binary / text, p50: wall {a / b:.2f}, this thread's CPU {c / d:.2f}")
    finally:
        drop_tenant(db, seat.tenant)
        db.close()


if __name__ == "__main__":
    main()
