"""How long does a run's start cost? hango's before_run beside a round trip and deepagents.

Everything is measured in this one process, against baselines measured in the same run:

1. hango ``SkillsMiddleware`` + ``MemoryMiddleware`` ``before_run`` (100 skills, 64 KiB of
   memory, the embedded PostgreSQL) in its three cases: *unchanged* (nothing written since the
   last run: the change check alone), *after a change* (one SKILL.md rewritten before each run:
   the gated reads and the parse of what changed) and *cold* (the process's cache cleared);
   as multiples of a trivial ``SELECT 1`` round trip through the same pool;
2. deepagents 0.7.32's two middlewares on its ``FilesystemBackend`` over the same files, with
   PyYAML's pure-Python ``safe_load`` (as shipped) AND with libyaml's C loader patched in
   (targets: hango unchanged >= 50x and >= 20x faster);
3. protocol round trips per before_run, COUNTED from a libpq trace of every pooled connection
   (a frontend ``Query`` or ``Sync`` is one wait for the server);
4. scaling to 1,000 skills (``SkillsMiddleware(max_skills=1000)``), unchanged and after a change;
5. frontmatter parsing per real-world file: hango's ``parse`` against PyYAML;
6. the skills index size in characters per skill.

Run: ``.venv/bin/python bench/before_run.py [--iterations 50] [--profile]``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import logging
import os
import pstats
import re
import statistics
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from psycopg.pq import Trace

from hango.agent.frontmatter import FrontmatterError, parse
from hango.agent.hooks import RunContext
from hango.agent.memory import MemoryMiddleware
from hango.agent.skills import SkillsMiddleware
from hango.agent.stack import Stack
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.perf import CACHE, CachedStack
from hango.perf import gated as gated_module
from hango.perf.trip import one_trip
from hango.settings import load_settings
from hango.telemetry import Telemetry

TENANT = f"bench-before-run-{os.getpid()}"  # concurrent runs never collide
NO_BUDGET = 10**9  # HANGO_SKILLS_INDEX_MAX_BYTES off: every skill indexed, as deepagents does
SKILL_BYTES = 2221  # the notes' setup (shared/notes/deepagents.md §6)
DESCRIPTION_CHARS = 196
MEMORY_BYTES = 64 * 1024
CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "skills-corpus" / "files"
FRONTMATTER = re.compile(r"^---\s*\n(.*?)\n---\s*\n", re.DOTALL)  # deepagents' split


# --- the content: the same files for hango (rows) and deepagents (a temp dir) ------------------

def skill_file(i: int) -> str:
    description = (f"Use this skill to prepare, check and summarise the data of project {i:04d} "
                   "when the user asks for a report, an audit or a migration plan; it lists the "
                   "steps, the usual pitfalls and a review checklist for each of them.")
    description = description[:DESCRIPTION_CHARS].ljust(DESCRIPTION_CHARS, ".")
    head = (f"---\nname: skill-{i:04d}\ndescription: {description}\nlicense: MIT\n---\n\n"
            f"# Skill {i:04d}\n\n")
    line = "Follow the steps in order and write down what you checked at each one.\n"
    body = (line * (SKILL_BYTES // len(line) + 1))[: SKILL_BYTES - len(head)]
    return head + body


def memory_file() -> str:
    line = "- The user prefers short answers, metric units and ISO dates (2026-01-31).\n"
    return (line * (MEMORY_BYTES // len(line) + 1))[:MEMORY_BYTES]


def files(n_skills: int) -> dict[str, str]:
    out = {f"/skills/skill-{i:04d}/SKILL.md": skill_file(i) for i in range(n_skills)}
    out["/memories/AGENTS.md"] = memory_file()
    return out


# --- timing helpers --------------------------------------------------------------------------

def timings(fn: Callable[[], object], iterations: int, warmup: int = 3) -> list[float]:
    """Seconds per call, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iterations):
        start = time.perf_counter()
        value = fn()
        elapsed = time.perf_counter() - start
        out.append(value if isinstance(value, float) else elapsed)  # self-timed: its own figure
    return out


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10)[8] if len(xs) > 1 else xs[0]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:9.3f}"


def row(label: str, xs: list[float], note: str = "") -> None:
    print(f"  {label:<50} {ms(p50(xs))} {ms(p90(xs))}  {note}")


# --- hango -----------------------------------------------------------------------------------

def hango_before_run(db: Database, agent_id: str, skills: SkillsMiddleware,
                     cached: bool = True) -> Callable[[], RunContext]:
    """One run's start, as ``Agent.run`` does it: a fresh RunContext, then the two hooks, on
    the cached stack (a server's choice) or the plain one (the library default)."""
    memory = MemoryMiddleware()
    config = AgentConfig()
    telemetry = Telemetry()
    stack = CachedStack([skills, memory]) if cached else Stack([skills, memory])

    def run() -> RunContext:
        ctx = RunContext(TENANT, agent_id, config, PostgresBackend(db, TENANT, agent_id),
                         "bench", frozenset(config.tools), telemetry)
        stack.before_run(ctx)
        return ctx

    return run


@contextlib.contextmanager
def select_1(db: Database) -> Iterator[Callable[[], object]]:
    """A bare round trip: ``SELECT 1`` on a pooled connection held in autocommit (no BEGIN)."""
    with db.pool.connection() as conn:
        conn.autocommit = True
        try:
            yield lambda: conn.execute("SELECT 1").fetchone()
        finally:
            conn.autocommit = False  # as the pool handed it out


def tenant_select_1(db: Database) -> Callable[[], object]:
    """What every hango query pays at least: checkout, BEGIN, set tenant, query, COMMIT."""
    def run() -> object:
        with db.tenant(TENANT) as conn:
            return conn.execute("SELECT 1").fetchone()
    return run


def trip_floor(db: Database, statements: int) -> Callable[[], object]:
    """The one round trip of a cached before_run with ``statements`` bare ``SELECT 1`` in place
    of the gated reads: the role and the tenant (``set_config``) in the same pipeline, one Sync.
    What the protocol and the pipeline cost before hango's SQL does any work."""
    return lambda: one_trip(db, TENANT, [("SELECT 1", {})] * statements)


def python_alone(hango: Callable[[], object]) -> Callable[[], object]:
    """``hango`` (an unchanged cached before_run) with its round trip's answer given back from
    one real trip: the time a run spends in Python, outside psycopg and the server."""
    answers: list[Any] = []

    def record(*args: Any) -> Any:
        answers[:] = [one_trip(*args)]
        return answers[0]

    def run() -> object:
        gated_module.one_trip = lambda *args: answers[0]
        try:
            return hango()
        finally:
            gated_module.one_trip = one_trip

    gated_module.one_trip = record
    try:
        hango()
    finally:
        gated_module.one_trip = one_trip
    return run


def round_trips(db: Database, fn: Callable[[], object]) -> int:
    """Protocol round trips ``fn`` makes, counted from a libpq trace of every pooled connection:
    each frontend ``Sync`` (extended protocol: one per statement, or one for a whole pipeline) or
    simple-protocol ``Query`` is one wait for the server. Not guessed, not timed."""
    pool = db.pool
    held = [pool.getconn() for _ in range(max(1, pool.get_stats().get("pool_available", 0)))]
    with tempfile.TemporaryFile() as trace:
        for conn in held:
            conn.pgconn.trace(os.dup(trace.fileno()))  # libpq owns (and leaks) the dup'd FILE*
            conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        for conn in held:
            pool.putconn(conn)
        try:
            fn()
        finally:
            held = [pool.getconn() for _ in held]
            for conn in held:
                conn.pgconn.untrace()  # flushes
                pool.putconn(conn)
        trace.seek(0)
        lines = trace.read().decode("utf-8", "replace").splitlines()
    # The client waits for the server at each Sync (extended protocol; a pipeline has one, at
    # its end) and each simple-protocol Query; nowhere else.
    return sum(1 for line in lines
               if line.split("\t")[0] == "F" and line.split("\t")[2:3] in (["Sync"], ["Query"]))


def rewrite_one_skill(db: Database, agent_id: str, n_skills: int) -> Callable[[], object]:
    """A write between two runs: the next before_run must see it (one skill's text changes)."""
    backend = PostgresBackend(db, TENANT, agent_id)
    state = {"i": 0}

    def write() -> object:
        state["i"] += 1
        i = state["i"] % n_skills
        text = skill_file(i).replace("Follow the steps", f"Follow the {state['i']} steps", 1)
        return backend.write(f"/skills/skill-{i:04d}/SKILL.md",
                             text.replace("license: MIT", f"license: MIT-{state['i']}", 1))

    return write


def after(prepare: Callable[[], object], fn: Callable[[], object]) -> Callable[[], float]:
    """``fn`` timed alone, right after an untimed ``prepare`` (returns its own seconds)."""
    def run() -> float:
        prepare()
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    return run


# --- deepagents ------------------------------------------------------------------------------

def unprepared(db: Database, skills: SkillsMiddleware, write: Callable[[], object],
               n: int) -> None:
    """What turning psycopg's prepared statements off costs (``HANGO_DATABASE_POOLER=
    transaction``, for a transaction-mode pooler): the same before_run and transaction on a
    second Database of the same server without them, interleaved with the default's. Straight to
    the server: the pooler's own hop is not in it."""
    off = Database(load_settings(database_name="hango_bench", database_pooler="transaction"))
    try:
        on_run, off_run = hango_before_run(db, "s100", skills), hango_before_run(off, "s100",
                                                                                 skills)
        t = interleaved({"on": (on_run, 4), "off": (off_run, 4),
                         "on_changed": (after(write, on_run), 1),
                         "off_changed": (after(write, off_run), 1),
                         "on_tx": (tenant_select_1(db), 2), "off_tx": (tenant_select_1(off), 2)},
                        n)
    finally:
        off.close()
    print(f"\nprepared statements off (HANGO_DATABASE_POOLER=transaction); {n} interleaved "
          "iterations")
    print(f"  {'':<50} {'p50 ms':>9} {'p90 ms':>9}")
    for key, label in (("", "before_run, unchanged, 4 back to back"),
                       ("_changed", "before_run, after one SKILL.md changed"),
                       ("_tx", "db.tenant() + SELECT 1")):
        row(label + ", prepared", t["on" + key])
        row(label + ", not prepared", t["off" + key],
            f"= {p50(t['off' + key]) / p50(t['on' + key]):.2f}x prepared")


def deepagents_before_agent(root: Path, libyaml: bool = False
                            ) -> tuple[Callable[[], Any], Any] | None:
    """deepagents' two middlewares; with ``libyaml``, its skills parser uses the C loader."""
    try:
        import deepagents.middleware.skills as da_skills_module
        from deepagents.backends import FilesystemBackend
        from deepagents.middleware.memory import MemoryMiddleware as DaMemory
        from deepagents.middleware.skills import SkillsMiddleware as DaSkills
    except ImportError:
        return None
    backend = FilesystemBackend(root_dir=str(root), virtual_mode=True)
    skills = DaSkills(backend=backend, sources=["/skills/"])
    memory = DaMemory(backend=backend, sources=["/memories/AGENTS.md"])

    def run() -> Any:
        with deepagents_libyaml(da_skills_module) if libyaml else contextlib.nullcontext():
            update = skills.before_agent({}, None, {})  # type: ignore[arg-type, typeddict-item]
            memory.before_agent({}, None, {})  # type: ignore[arg-type, typeddict-item]
        return update

    return run, skills


C_YAML = types.SimpleNamespace(  # the two names deepagents' skills module takes from ``yaml``
    safe_load=lambda text: yaml.load(text, Loader=yaml.CSafeLoader), YAMLError=yaml.YAMLError)


@contextlib.contextmanager
def deepagents_libyaml(module: types.ModuleType) -> Iterator[None]:
    """deepagents' skills parser (``module``: ``deepagents.middleware.skills``) on libyaml's C
    loader inside the block only: the shipped and the patched runs are interleaved."""
    shipped = module.yaml
    module.yaml = C_YAML
    try:
        yield
    finally:
        module.yaml = shipped


def write_tree(root: Path, content: dict[str, str]) -> None:
    for path, text in content.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


# --- frontmatter -----------------------------------------------------------------------------

def per_file_us(fn: Callable[[bytes, str], object], corpus: list[tuple[bytes, str]],
                reps: int) -> float:
    """Mean microseconds per file over ``reps`` passes of the corpus (errors count as work)."""
    start = time.perf_counter()
    for _ in range(reps):
        for raw, text in corpus:
            with contextlib.suppress(FrontmatterError, yaml.YAMLError):
                fn(raw, text)
    return (time.perf_counter() - start) / (reps * len(corpus)) * 1e6


def frontmatter_bench(reps: int) -> None:
    paths = sorted(CORPUS.rglob("*.md"))
    if not paths:
        print(f"  corpus not found at {CORPUS}; skipped")
        return
    corpus = []
    for p in paths:
        raw = p.read_bytes()
        match = FRONTMATTER.match(raw.decode("utf-8", "replace"))
        corpus.append((raw, match.group(1) if match else ""))
    hango = per_file_us(lambda raw, _: parse(raw), corpus, reps)
    c_safe = per_file_us(lambda _, t: yaml.load(t, Loader=yaml.CSafeLoader), corpus, reps)
    safe = per_file_us(lambda _, t: yaml.load(t, Loader=yaml.SafeLoader), corpus, reps)
    print(f"  {len(corpus)} files, {reps} passes; hango parses the file bytes, PyYAML the "
          "frontmatter text")
    print(f"  {'parser':<34} {'µs/file':>9} {'vs hango':>9}")
    for label, us in (("hango frontmatter.parse", hango), ("yaml.load CSafeLoader", c_safe),
                      ("yaml.load SafeLoader", safe)):
        print(f"  {label:<34} {us:9.1f} {us / hango:8.2f}x")


# --- main ------------------------------------------------------------------------------------

def seed(db: Database, agent_id: str, content: dict[str, str], tenant: str = TENANT) -> None:
    save_agent(db, tenant, agent_id, AgentConfig())
    backend = PostgresBackend(db, tenant, agent_id)
    for path, text in content.items():
        backend.write(path, text)


def interleaved(fns: dict[str, tuple[Callable[[], object], int]],
                iterations: int) -> dict[str, list[float]]:
    """Time the functions in turns, ``burst`` calls of each per round, so that load on a shared
    machine falls on all of them alike: their ratios are the result, not their absolute times."""
    out: dict[str, list[float]] = {}
    for name, (fn, _) in fns.items():
        out[name] = timings(fn, 0, warmup=3)  # warm-up only
    for _ in range(iterations):
        for name, (fn, burst) in fns.items():
            out[name] += timings(fn, burst, warmup=0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--scale-iterations", type=int, default=20)
    parser.add_argument("--frontmatter-passes", type=int, default=200)
    parser.add_argument("--profile", action="store_true", help="cProfile hango's before_run")
    args = parser.parse_args()
    # ctx.warn logs every warning; keep the records (their cost is real) but off the terminal.
    logging.getLogger("hango").addHandler(logging.NullHandler())
    logging.getLogger("hango").propagate = False
    db = Database(load_settings(database_name="hango_bench"))
    create_tenant(db, TENANT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            bench(db, Path(tmp), args)
    finally:
        drop_tenant(db, TENANT)
        db.close()


def bench(db: Database, tmp: Path, args: argparse.Namespace) -> None:
    n = args.iterations
    small, large = files(100), files(1000)
    for name, content in (("s100", small), ("s1000", large)):
        seed(db, name, content)
        write_tree(tmp / name, content)

    print(f"load: {os.getloadavg()} on {os.cpu_count()} CPUs")
    print(f"before_run: 100 skills x {SKILL_BYTES} B (license: MIT), {MEMORY_BYTES} B memory; "
          f"{n} interleaved iterations after warm-up")
    # deepagents indexes every skill: no index byte budget here either (like for like)
    skills = SkillsMiddleware(max_skills=100, index_max_bytes=NO_BUDGET)
    hango = hango_before_run(db, "s100", skills)
    ctx = hango()
    published = ctx.attributes
    assert published["hango.skills.count"] == 100, ctx
    assert published["hango.memory.bytes"] == MEMORY_BYTES, ctx
    write = rewrite_one_skill(db, "s100", 100)
    changed = after(write, hango)

    def cold() -> float:
        CACHE.clear()
        start = time.perf_counter()
        hango()
        return time.perf_counter() - start

    da = deepagents_before_agent(tmp / "s100")
    da_c = deepagents_before_agent(tmp / "s100", libyaml=True)
    with select_1(db) as round_trip:
        # Round trips in bursts of 8: the unit is a back-to-back round trip (a lone one right
        # after a heavy run is slower, and would flatter hango's multiple).
        # hango unchanged twice: alone right after a deepagents call (its CPU caches cold), and
        # 4 back to back, as a server runs one agent's runs.
        fns: dict[str, tuple[Callable[[], object], int]] = {
            "rt": (round_trip, 8), "tx": (tenant_select_1(db), 2), "hango": (hango, 4),
            "floor0": (trip_floor(db, 0), 2), "floor2": (trip_floor(db, 2), 2),
            "python": (python_alone(hango), 4),
            "lone": (hango, 1), "changed": (changed, 1), "cold": (cold, 1)}
        if da is not None and da_c is not None:
            fns["da"] = (da[0], 1)
            fns["da_c"] = (da_c[0], 1)
        t = interleaved(fns, n)
    rt, tx, h100 = t["rt"], t["tx"], t["hango"]
    print(f"  {'':<50} {'p50 ms':>9} {'p90 ms':>9}")
    row("SELECT 1 round trip (pooled conn, autocommit)", rt)
    row("db.tenant() + SELECT 1 (one hango query elsewhere)", tx,
        f"= {p50(tx) / p50(rt):.1f} round trips")
    row("one pipeline: role and tenant alone", t["floor0"],
        f"= {p50(t['floor0']) / p50(rt):.1f} round trips")
    row("one pipeline: role, tenant and 2 x SELECT 1", t["floor2"],
        f"= {p50(t['floor2']) / p50(rt):.1f} round trips (the reads' floor)")
    row("hango before_run, unchanged, 4 back to back", h100,
        f"= {p50(h100) / p50(rt):.1f} round trips")
    row("hango before_run, unchanged, its Python alone", t["python"],
        f"= {p50(t['python']) / p50(rt):.1f} round trips (the trip's answer given back)")
    row("hango before_run, unchanged, alone after deepagents", t["lone"],
        f"= {p50(t['lone']) / p50(rt):.1f} round trips")
    row("hango before_run, after one SKILL.md changed", t["changed"],
        f"= {p50(t['changed']) / p50(rt):.1f} round trips")
    row("hango before_run, cold (process cache cleared)", t["cold"],
        f"= {p50(t['cold']) / p50(rt):.1f} round trips")
    if da is None:
        print("  deepagents: not installed; pip install deepagents==0.7.32 "
              "(or pip install -e '.[bench]')")
    else:
        for key, label, goal in (("da", "deepagents 0.7.32 before_agent (FilesystemBackend)", 50),
                                 ("da_c", "deepagents 0.7.32 + libyaml CSafeLoader", 20)):
            row(label, t[key], f"= {p50(t[key]) / p50(h100):.1f}x hango unchanged (goal >= "
                f"{goal}x), {p50(t[key]) / p50(t['lone']):.1f}x alone, "
                f"{p50(t[key]) / p50(t['changed']):.1f}x after a change")
    example = ctx.warnings[0] if ctx.warnings else "-"
    print(f"  hango: {len(ctx.warnings)} warnings per run, e.g. {example}")

    trips_unchanged = round_trips(db, hango)
    write()
    trips_changed = round_trips(db, hango)
    CACHE.clear()
    trips_cold = round_trips(db, hango)
    print(f"  protocol round trips per before_run (libpq trace): unchanged {trips_unchanged}, "
          f"after a change {trips_changed}, cold {trips_cold}; db.tenant() + SELECT 1: "
          f"{round_trips(db, tenant_select_1(db))}")

    unprepared(db, skills, write, n)

    print(f"\nscaling: 1,000 skills, SkillsMiddleware(max_skills=1000); "
          f"{args.scale_iterations} interleaved iterations")
    h1000 = hango_before_run(db, "s1000", SkillsMiddleware(max_skills=1000,
                                                            index_max_bytes=NO_BUDGET))
    assert h1000().attributes["hango.skills.count"] == 1000
    # Unchanged runs in bursts of 4, back to back as a server runs them: a lone one right after
    # a 1-second deepagents call measures its CPU caches being cold, not hango.
    fns = {"hango": (h1000, 4), "changed": (after(rewrite_one_skill(db, "s1000", 1000), h1000), 1)}
    da_1000 = deepagents_before_agent(tmp / "s1000")
    if da_1000 is not None:
        fns["da"] = (da_1000[0], 1)
    t = interleaved(fns, args.scale_iterations)
    print(f"  {'':<50} {'p50 ms':>9} {'p90 ms':>9}")
    row("hango before_run, 1,000 skills, unchanged (bursts of 4)", t["hango"], "(goal <= 1 ms)")
    row("hango before_run, 1,000 skills, after a change", t["changed"], "(goal <= 15 ms)")
    if da_1000 is not None:
        row("deepagents before_agent, 1,000 skills", t["da"],
            f"= {p50(t['da']) / p50(t['hango']):.1f}x hango unchanged, "
            f"{p50(t['da']) / p50(t['changed']):.1f}x after a change")

    print("\nfrontmatter parsing per real-world file (shared/corpus/skills/files)")
    frontmatter_bench(args.frontmatter_passes)

    print("\nskills index size, 100 skills with a 196-character description")
    (block,) = skills.system_blocks(ctx)  # the index exactly as the model sees it
    lines = [line for line in block.text.splitlines() if line.startswith("- ")]
    print(f"  hango index block (header, 100 lines, footer) {len(block.text):7,} chars = "
          f"{len(block.text) / 100:5.1f} per skill ({statistics.mean(map(len, lines)):.1f} "
          "per line alone)")
    if da is None:
        print("  deepagents {skills_list}: not measured (not installed); the notes give 28,999 "
              "chars = ~290 per skill")
    else:
        update = da[0]()
        assert len(update["skills_metadata"]) == 100  # every file parsed by deepagents too
        da_list = da[1]._format_skills_list(update["skills_metadata"])
        print(f"  deepagents {{skills_list}} (list slot only)     {len(da_list):7,} chars = "
              f"{len(da_list) / 100:5.1f} per skill (notes: ~290)")

    print(f"\nload after: {os.getloadavg()}")
    if args.profile:
        print("\ncProfile of hango before_run (100 skills) after a change, 20 runs, top 15 by "
              "internal time")
        profiler = cProfile.Profile()
        for _ in range(20):
            write()
            profiler.enable()
            hango()
            profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
