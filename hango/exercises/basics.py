"""Checks for notebooks 00 (setup and tour), 01 (paths) and 02 (memory over the files API)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hango.agents import AgentConfig
from hango.exercises._core import (
    NotYet,
    _block_index,
    _run,
    _scratch,
    _tool_results,
    exercise,
    ints,
    measured,
)
from hango.fs.backend import FileNotFound
from hango.fs.path import PathError, clean, is_reserved

if TYPE_CHECKING:
    from hango.agent.runtime import RunResult
    from hango.notebook import Course


# --- 00 setup and tour --------------------------------------------------------------------------


@exercise("00.1", "List a new note with the agent's ls tool",
          answer="result=the RunResult of a run whose model calls ls on /notes/ after you wrote "
                 "/notes/todo.md",
          hint="course.owner.write('/notes/todo.md', ...), then script the model with [tool_call('ls', "
               "{'path': '/notes/'})] before its answer")
def _00_1(course: Course, result: RunResult | None = None) -> str:
    try:
        course.owner.read("/notes/todo.md")
    except Exception:
        raise NotYet("/notes/todo.md does not exist yet") from None
    run = _run(result)
    listed = [content for name, args, content, _ in _tool_results(run)
              if name == "ls" and args.get("path", "/").startswith("/notes")]
    if not listed:
        raise NotYet("the run made no ls call on /notes/")
    if "/notes/todo.md" not in listed[0]:
        raise NotYet(f"the ls result does not show /notes/todo.md: {listed[0]!r}")
    return "the ls tool result lists /notes/todo.md, read from PostgreSQL by the agent's tool"


def below_minimum(course: Course, rules: int) -> bool:
    from hango.models.simulated import SimulatedModel

    text = "\n".join(f"Rule {i:02d}: answer from the team's files, and name the file you used."
                     for i in range(1, rules + 1))
    backend = _scratch(course, "check-00-2",
                       AgentConfig(system_prompt="You are the team's assistant.\n" + text))
    backend.write("/memories/AGENTS.md", "The team keeps its notes under /notes/.")
    clock = [0.0]
    agent = course.agent(SimulatedModel(policy=["a", "b"], clock=lambda: clock[0]), "check-00-2")
    first = agent.run("Where are the notes?")
    clock[0] += 30
    second = agent.run("Did you learn that from memory?", history=first.messages)
    return any(r.diagnostics is not None and r.diagnostics.miss_reason == "below_minimum"
               for r in first.responses + second.responses)


@exercise("00.2", "Find the smallest prompt the cache still takes",
          answer="rules=a whole number: the fewest rules whose prompt is still cached",
          hint="try rules=30, then halve the distance; show_usage's last column says below_minimum when "
               "the cached prefix is too short")
def _00_2(course: Course, rules: int | None = None) -> str:
    if not isinstance(rules, int) or rules < 1:
        raise NotYet("pass the smallest number of rules that still caches, as rules=N")
    if below_minimum(course, rules):
        raise NotYet(f"with {rules} rules a call is still below_minimum")
    if rules > 1 and not below_minimum(course, rules - 1):
        raise NotYet(f"{rules - 1} rules still cache: your number is not the smallest")
    return f"{rules} rules cache, {rules - 1} fall below the model's minimum cacheable length"


# --- 01 paths and reserved prefixes ----------------------------------------------------------


@exercise("01.1", "Try to slip past the prefix rule",
          answer="statuses=[three HTTP status codes, whole numbers, in the order you sent the paths]",
          hint="the server decodes %2E%2E and %2F before it checks the path; /memorie/ is one letter "
               "short of reserved")
def _01_1(course: Course, statuses: Sequence[int] | None = None) -> str:
    if not statuses:
        raise NotYet("pass the three statuses you got from raw(), as statuses=[...]")
    got = ints(statuses, "statuses", 3)
    if got != [422, 422, 201]:
        raise NotYet(f"got {got}: compare each with the rule that decided it")
    try:
        course.backend().read("/memorie/x")
    except FileNotFound:
        raise NotYet("the statuses are right, but /memorie/x is not in the agent's files") from None
    return "two rejected as invalid paths (never resolved), /memorie/x stored as an ordinary file"


@exercise("01.2", "Find another spelling of /memories/AGENTS.md",
          answer="path=a string that reads as /memories/AGENTS.md and that clean() accepts",
          hint="unicodedata.normalize('NFKC', path) shows what a look-alike 'means'; clean() compares "
               "code points, not looks")
def _01_2(course: Course, path: str | None = None) -> str:
    target = "/memories/AGENTS.md"
    if not isinstance(path, str) or path == target:
        raise NotYet("pass another spelling of /memories/AGENTS.md as path='...'")
    if unicodedata.normalize("NFKC", path) != target:
        raise NotYet(f"{path!r} is not a spelling of {target}: NFKC gives "
                     f"{unicodedata.normalize('NFKC', path)!r}")
    try:
        cleaned = clean(path)
    except PathError as exc:
        raise NotYet(f"clean() rejects it ({exc.rule}): look for one it accepts") from None
    reserved = is_reserved(cleaned)
    return (f"clean() accepts {path!r}; reserved: {reserved}; memory loads only the exact "
            f"configured source {target!r}, so this file is never injected into a prompt")


# --- 02 memory through the files API ----------------------------------------------------------


@exercise("02.1", "Write memory through the files API and find it in the next prompt",
          answer="result=the RunResult of a run made after your owner's write",
          hint="course.owner.write('/memories/AGENTS.md', ...), run, then compare the memory block's "
               "index with request.system_breakpoint")
def _02_1(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    try:
        text = course.owner.read("/memories/AGENTS.md")
    except Exception:
        raise NotYet("/memories/AGENTS.md does not exist: write it as the owner") from None
    request = run.requests[0]
    at = _block_index(request, "/memories/AGENTS.md")
    if at is None:
        raise NotYet("the run's first request has no /memories/AGENTS.md block")
    if text.strip() and text.strip().splitlines()[0] not in request.system[at].text:
        raise NotYet("the block is not the file's current text: run again after writing")
    breakpoint_at = request.system_breakpoint
    if breakpoint_at is None or at <= breakpoint_at:
        raise NotYet(f"memory is block {at}, breakpoint {breakpoint_at}: is the stack changed?")
    return f"memory is system block {at}, after the cache breakpoint on block {breakpoint_at}"


@exercise("02.2", "Hide a note from the model",
          answer="predicted=[your memory size in bytes per run], results=[those RunResults, same order]",
          hint="comments go wherever they are, fences included; an unterminated <!-- stays; the bytes are"
               " UTF-8 bytes of what is left")
def _02_2(course: Course, predicted: Sequence[int] | None = None,
          results: Sequence[RunResult] | None = None) -> str:
    if not predicted or not results or len(predicted) != len(results):
        raise NotYet("pass predicted=[...] and results=[...], one prediction per run")
    sizes = ints(predicted, "predicted")
    actual = [measured(_run(r, "results"), "hango.memory.bytes") for r in results]
    if sizes != actual:
        raise NotYet(f"predicted {sizes}, the runs injected {actual}")
    return f"all {len(actual)} predictions match hango.memory.bytes: {actual}"


@exercise("02.3", "Share the byte cap between two sources",
          answer="result=the RunResult of the run with two 150-byte sources and memory_max_bytes=200",
          hint="put_agent(AgentConfig(memory=[a, b])) and course.agent(model, "
               "settings=load_settings(memory_max_bytes=200))")
def _02_3(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    memory = [b for b in run.requests[0].system if b.source.startswith("/memories/")]
    if len(memory) < 1:
        raise NotYet("the run has no memory block")
    if measured(run, "hango.memory.bytes") > 200:
        raise NotYet("more than 200 bytes injected: run with memory_max_bytes=200")
    sizes = {e.path: e.size for e in course.owner.ls("/memories/")}
    sources = [b.source for b in memory]
    if len(sizes) < 2 or any(sizes.get(s) != 150 for s in sources):
        raise NotYet(f"the sources should be two files of 150 bytes; they are {sizes}")
    if not any("truncated" in w or "left out" in w for w in run.warnings):
        raise NotYet("no warning says what was cut")
    return (f"{sources[0]} is whole, the cap cut what followed, and a warning says so: "
            f"{next(w for w in run.warnings if 'truncated' in w or 'left out' in w)!r}")
