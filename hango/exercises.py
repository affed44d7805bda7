"""``check("02.1", course, result=...)``: the course's exercises, checked against the real system.

Each exercise at the end of a notebook has a check that looks at what the learner *did*: the
files in the database, the requests a run really sent, the warnings and events it recorded. It
prints ``PASS`` with what was verified, or ``NOT YET`` with what is missing and a hint; it never
raises, so a notebook always runs to the end. The solutions live in ``notebooks/solutions/``
and run in CI, so a check and its solution cannot drift apart.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from hango.agents import AgentConfig, save_agent
from hango.fs.backend import FileNotFound, PostgresBackend
from hango.fs.path import PathError, clean, is_reserved
from hango.models.base import Request

if TYPE_CHECKING:
    from hango.agent.runtime import RunResult
    from hango.notebook import Course


class NotYet(Exception):
    """What the learner's work does not show yet (the check prints it with the hint)."""


@dataclass(frozen=True)
class Exercise:
    id: str
    hint: str
    check: Callable[..., str]


EXERCISES: dict[str, Exercise] = {}


def exercise(exercise_id: str, hint: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    def register(fn: Callable[..., str]) -> Callable[..., str]:
        EXERCISES[exercise_id] = Exercise(exercise_id, hint, fn)
        return fn
    return register


def check(exercise_id: str, course: Course, **work: Any) -> None:
    """Check one exercise; print ``PASS ...`` or ``NOT YET ...`` and a hint. Never raises."""
    ex = EXERCISES[exercise_id]
    try:
        verified = ex.check(course, **work)
    except NotYet as missing:
        print(f"NOT YET {exercise_id}: {missing}\n  hint: {ex.hint}")
        return
    print(f"PASS {exercise_id}: {verified}")


# --- what a run shows -------------------------------------------------------------------------


def _run(result: RunResult | None, name: str = "result") -> RunResult:
    if result is None or not hasattr(result, "requests"):
        raise NotYet(f"no run yet: pass the RunResult of your run as {name}=...")
    return result


def measured(result: RunResult, name: str) -> Any:
    """A measurement a middleware published for the run (``hango.memory.bytes``, ...)."""
    attributes = getattr(result, "attributes", None)
    if isinstance(attributes, dict) and name in attributes:
        return attributes[name]
    return getattr(result, name.removeprefix("hango.").replace(".", "_"))


def _block_index(request: Request, source: str) -> int | None:
    return next((i for i, b in enumerate(request.system) if b.source == source), None)


def _tool_results(result: RunResult) -> list[tuple[str, dict[str, Any], str, bool]]:
    calls = {c.id: c for m in result.messages for c in m.tool_calls}
    return [(calls[r.call_id].name, dict(calls[r.call_id].arguments), r.content, r.is_error)
            for m in result.messages for r in m.tool_results if r.call_id in calls]


def _refused(content: str, is_error: bool) -> bool:
    """A call the runtime refused (allowlist, a skill in use), not one that ran and failed."""
    return is_error and content.startswith("refused")


def _index_text(result: RunResult) -> str:
    index = _block_index(result.requests[0], "skills")
    return "" if index is None else result.requests[0].system[index].text


def _scratch(course: Course, agent_id: str, config: AgentConfig) -> PostgresBackend:
    """An agent of the check's own in the learner's tenant: the learner's agent is left alone."""
    save_agent(course.db, course.tenant, agent_id, config)
    backend = course.backend(agent_id)
    for path in backend.glob("/**"):
        backend.delete(path)
    return backend


# --- 00 setup and tour --------------------------------------------------------------------------


@exercise("00.1", "course.owner.write('/notes/todo.md', ...), then script the model with "
                  "[tool_call('ls', {'path': '/notes/'})] before its answer")
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


@exercise("00.2", "try rules=30, then halve the distance; show_usage's last column says "
                  "below_minimum when the cached prefix is too short")
def _00_2(course: Course, rules: int | None = None) -> str:
    if not isinstance(rules, int) or rules < 1:
        raise NotYet("pass the smallest number of rules that still caches, as rules=N")
    if below_minimum(course, rules):
        raise NotYet(f"with {rules} rules a call is still below_minimum")
    if rules > 1 and not below_minimum(course, rules - 1):
        raise NotYet(f"{rules - 1} rules still cache: your number is not the smallest")
    return f"{rules} rules cache, {rules - 1} fall below the model's minimum cacheable length"


# --- 01 paths and reserved prefixes ----------------------------------------------------------


@exercise("01.1", "the server decodes %2E%2E and %2F before it checks the path; /memorie/ is "
                  "one letter short of reserved")
def _01_1(course: Course, statuses: Sequence[int] | None = None) -> str:
    if statuses is None or len(statuses) != 3:
        raise NotYet("pass the three statuses you got from raw(), as statuses=[...]")
    if list(statuses) != [422, 422, 201]:
        raise NotYet(f"got {list(statuses)}: compare each with the rule that decided it")
    try:
        course.backend().read("/memorie/x")
    except FileNotFound:
        raise NotYet("the statuses are right, but /memorie/x is not in the agent's files") from None
    return "two rejected as invalid paths (never resolved), /memorie/x stored as an ordinary file"


@exercise("01.2", "unicodedata.normalize('NFKC', path) shows what a look-alike 'means'; "
                  "clean() compares code points, not looks")
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


@exercise("02.1", "course.owner.write('/memories/AGENTS.md', ...), run, then compare the "
                  "memory block's index with request.system_breakpoint")
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


@exercise("02.2", "comments go wherever they are, fences included; an unterminated <!-- stays; "
                  "the bytes are UTF-8 bytes of what is left")
def _02_2(course: Course, predicted: Sequence[int] | None = None,
          results: Sequence[RunResult] | None = None) -> str:
    if predicted is None or results is None or len(predicted) != len(results) or not results:
        raise NotYet("pass predicted=[...] and results=[...], one prediction per run")
    actual = [measured(_run(r, "results"), "hango.memory.bytes") for r in results]
    if list(predicted) != actual:
        raise NotYet(f"predicted {list(predicted)}, the runs injected {actual}")
    return f"all {len(actual)} predictions match hango.memory.bytes: {actual}"


@exercise("02.3", "put_agent(AgentConfig(memory=[a, b])) and "
                  "course.agent(model, settings=load_settings(memory_max_bytes=200))")
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


# --- 03 skills index -----------------------------------------------------------------------------


@exercise("03.1", "write /skills/csv/SKILL.md and /skills/team/pdf/SKILL.md; configure "
                  "skills=['/skills/base/', '/skills/team/'] with a pdf in each")
def _03_1(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    index = _index_text(run)
    names = [line.split()[1] for line in index.splitlines() if line.startswith("- ")]
    if "pdf" not in names:
        raise NotYet(f"no pdf skill in the index (it has {names})")
    if not any("overrides" in w for w in run.warnings):
        raise NotYet("no warning about one pdf overriding another: configure two sources")
    for path in course.owner.glob("/skills/**/SKILL.md"):
        body = course.owner.read(path).split("\n---", 2)[-1].strip()
        if body and any(body in b.text for r in run.requests for b in r.system):
            raise NotYet(f"the body of {path} is in a system block")
    return f"index {names}; the later source's pdf wins, with a warning; no body in any prompt"


@exercise("03.2", "the cap keeps skills by name, in order; the warning names the rest")
def _03_2(course: Course, kept: str | None = None, result: RunResult | None = None) -> str:
    run = _run(result)
    names = [line.split()[1] for line in _index_text(run).splitlines() if line.startswith("- ")]
    if names != [kept]:
        raise NotYet(f"you predicted {kept!r}; the index kept {names}")
    said = [w for w in run.warnings if "HANGO_SKILLS_MAX" in w]
    if not said:
        raise NotYet("no warning names HANGO_SKILLS_MAX: run with load_settings(skills_max=1)")
    return f"kept {kept!r}; the warning: {said[0]!r}"


# --- 04 broken frontmatter -------------------------------------------------------------------


@exercise("04.1", "an unquoted ': ' in a value, name: yes, and a description of 1,025 "
                  "characters; then quote, quote, and cut one character")
def _04_1(course: Course, results: Sequence[RunResult] | None = None) -> str:
    if not results or len(results) != 3:
        raise NotYet("pass the three runs as results=[...]")
    for run in results:
        run = _run(run, "results")
        if run.stop_reason != "final":
            raise NotYet(f"run {run.run_id} did not finish: a bad skill must never fail a run")
        skipped = [w for w in run.warnings if "skipped" in w]
        if not skipped:
            raise NotYet(f"run {run.run_id} skipped no skill: is the frontmatter really broken?")
        if not any("/SKILL.md" in w and "line" in w for w in skipped) and \
                not any("1024" in w or "1,024" in w for w in skipped):
            raise NotYet(f"run {run.run_id}'s warning does not name the file and line: {skipped}")
        if "- report " not in _index_text(run):
            raise NotYet(f"run {run.run_id} lost the good skill 'report'")
    return "each run finished, kept 'report', and named the broken file, its line and the rule"


@exercise("04.2", "parse() raises FrontmatterError or returns a Frontmatter; predict which")
def _04_2(course: Course, predicted: dict[str, bool] | None = None) -> str:
    from hango.agent.frontmatter import FrontmatterError, parse

    cases = {
        "name of 65 characters": "---\nname: " + "a" * 65 + "\ndescription: d\n---\n",
        "description of 1,024 characters": "---\nname: a\ndescription: " + "d" * 1024 + "\n---\n",
        "allowed-tools: with nothing after it": "---\nname: a\ndescription: d\nallowed-tools:\n---\n",
    }
    if not predicted or set(predicted) != set(cases):
        raise NotYet(f"pass predicted={{...}} with True (accepted) or False for each of {list(cases)}")
    actual = {}
    for name, text in cases.items():
        try:
            parse(text)
            actual[name] = True
        except FrontmatterError:
            actual[name] = False
    wrong = {k: actual[k] for k in cases if predicted[k] != actual[k]}
    if wrong:
        raise NotYet(f"parse() disagrees with you on {wrong}")
    return f"all three as predicted: {actual}"


# --- 05 allowed-tools narrowing ------------------------------------------------------------------


@exercise("05.1", "allowed-tools: read_file write_file on an agent with tools [read_file, ls]; "
                  "script read_file of the skill, then ls, then write_file")
def _05_1(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    narrowed = [e for e in run.events if e.name == "agent.skill_tools_narrowed"]
    if not any("write_file" in str(e.attributes) for e in narrowed):
        raise NotYet("no agent.skill_tools_narrowed event drops write_file")
    calls = _tool_results(run)
    read_at = next((i for i, (n, a, _, err) in enumerate(calls)
                    if n == "read_file" and str(a.get("path", "")).endswith("SKILL.md") and not err),
                   None)
    if read_at is None:
        raise NotYet("the model never read the skill's SKILL.md")
    refused_ls = [i for i, (n, _, c, err) in enumerate(calls) if n == "ls" and _refused(c, err)]
    if not refused_ls or min(refused_ls) < read_at:
        raise NotYet("ls was not refused after the skill was read")
    return "write_file dropped at index time; ls refused only once the skill was in use"


@exercise("05.2", "Frontmatter.allowed_tools is () for [] and None for no key")
def _05_2(course: Course, with_empty_list: set[str] | None = None,
          without_key: set[str] | None = None) -> str:
    from hango.models.simulated import SimulatedModel, tool_call

    allow = ["read_file", "ls"]
    actual = {}
    for label, line in (("[]", "allowed-tools: []\n"), ("no key", "")):
        backend = _scratch(course, "check-05-2", AgentConfig(tools=allow, memory=[]))
        backend.write("/skills/s/SKILL.md", f"---\nname: s\ndescription: d\n{line}---\n# s\n")
        skill = {"path": "/skills/s/SKILL.md"}
        model = SimulatedModel(policy=[[tool_call("read_file", skill)],
                                       [tool_call("read_file", skill), tool_call("ls", {"path": "/"})],
                                       "done"])
        run = course.agent(model, "check-05-2").run("go")
        actual[label] = {n for n, _, c, err in _tool_results(run)[1:] if not _refused(c, err)}
    if with_empty_list is None or without_key is None:
        raise NotYet("pass with_empty_list={...} and without_key={...}: the tools still callable")
    if set(with_empty_list) != actual["[]"] or set(without_key) != actual["no key"]:
        raise NotYet(f"predicted {set(with_empty_list)} and {set(without_key)}; the agent could "
                     "call something else")
    return (f"after reading it: [] leaves {sorted(actual['[]']) or 'nothing'}, no key leaves "
            f"{sorted(actual['no key'])}")


# --- 06 cache read ratio --------------------------------------------------------------------------


def _conversation(conversation: Any, name: str) -> tuple[Any, list[Any]]:
    """The model and the responses of a notebook-06 ``Conversation`` (or anything with both)."""
    model, responses = getattr(conversation, "model", None), getattr(conversation, "responses", None)
    if not hasattr(model, "traces") or not isinstance(responses, list) or not responses:
        raise NotYet(f"no conversation yet: pass what experiment(...) returned as {name}=...")
    return model, responses


def _memory_after_breakpoint(model: Any) -> bool:
    """Where memory sat in the conversation's last request: after the system breakpoint?"""
    request = model.calls[-1][0]
    at = next((i for i, b in enumerate(request.system) if b.source.startswith("/memories/")), None)
    if at is None:
        raise NotYet("the conversation's requests have no memory block: use a stack with memory")
    return request.system_breakpoint is not None and at > request.system_breakpoint


def _dollars(model: Any, responses: list[Any]) -> float:
    from hango.models.simulated import cost

    return sum(cost(r.usage, model.name) for r in responses)


@exercise("06.1", "experiment(STACKS[name], turns=6, memory_before={t: MEMORY + f'- Today is "
                  "turn {t}.\\n' for t in range(1, 7)}) for 'default' and 'memory-before-cache'")
def _06_1(course: Course, default: Any = None, wrong: Any = None) -> str:
    d_model, d_calls = _conversation(default, "default")
    w_model, w_calls = _conversation(wrong, "wrong")
    if not _memory_after_breakpoint(d_model):
        raise NotYet("in default=..., memory is not after the breakpoint: use STACKS['default']")
    if _memory_after_breakpoint(w_model):
        raise NotYet("in wrong=..., memory is after the breakpoint: use "
                     "STACKS['memory-before-cache']")
    if len(d_calls) < 6 or len(w_calls) < 6:
        raise NotYet(f"{len(d_calls)} and {len(w_calls)} calls: run six turns each")
    edited = [i for i, r in enumerate(w_calls[1:], 2)
              if r.diagnostics is not None and r.diagnostics.miss_reason == "system_changed"]
    if len(edited) < len(w_calls) - 1:
        raise NotYet(f"memory changed only before calls {edited}: edit it before every turn")
    if any(r.usage.cache_read_input_tokens for r in w_calls[1:]):
        raise NotYet("the wrong order read from the cache after an edit: is memory really edited?")
    if not all(r.usage.cache_read_input_tokens for r in d_calls[1:]):
        raise NotYet("a default-stack call read nothing: the prefix should survive every edit")
    d, w = _dollars(d_model, d_calls), _dollars(w_model, w_calls)
    return (f"an edit before every turn: the default stack reads its prefix on every call after "
            f"the first (${d:.6f}); memory before the breakpoint reads nothing (${w:.6f}, "
            f"{w / d:.1f}x)")


@exercise("06.2", "SimulatedModel(min_cacheable=2048, ...) in experiment; a breakpoint caches "
                  "only once the prompt up to it reaches 2,048 tokens")
def _06_2(course: Course, runs: dict[str, Any] | None = None,
          first_read: dict[str, int] | None = None) -> str:
    if not isinstance(runs, dict) or not runs:
        raise NotYet("pass the three conversations as runs={name: experiment(...)}")
    actual = {}
    for name, conversation in runs.items():
        model, responses = _conversation(conversation, f"runs[{name!r}]")
        if model.min_cacheable != 2048:
            raise NotYet(f"runs[{name!r}] was made with min_cacheable={model.min_cacheable}")
        actual[name] = next((i for i, r in enumerate(responses, 1)
                             if r.usage.cache_read_input_tokens), None)
    if len(actual) != 3:
        raise NotYet(f"pass all three stacks, not {sorted(actual)}")
    if not isinstance(first_read, dict) or first_read != actual:
        raise NotYet(f"predict the first call that reads, per stack, as first_read={{...}}; "
                     f"you predicted {first_read}")
    return f"first call that reads from the cache, per stack: {actual}"


@exercise("06.3", "conversation.clock[0] += 300, ask a turn, then += 299; an entry is alive "
                  "while start < expires_at")
def _06_3(course: Course, conversation: Any = None,
          predicted: Sequence[str | None] | None = None) -> str:
    model, responses = _conversation(conversation, "conversation")
    starts = [t.started for t in model.traces[-3:]]
    if len(starts) < 3 or [b - a for a, b in pairwise(starts)] != [300, 299]:
        raise NotYet(f"the last three calls started at {starts}: wait 300 s, ask, wait 299 s, ask")
    actual = [r.diagnostics.miss_reason if r.diagnostics else None for r in responses[-2:]]
    if predicted is None or list(predicted) != actual:
        raise NotYet(f"pass your two predictions of why not read as predicted=[...] (None for a "
                     f"full read); you predicted {predicted}")
    return (f"after 300 s: {actual[0]} (the 5-minute entry expired at the very second the call "
            f"started); after 299 s: {actual[1] or 'a full read'}")


@exercise("06.4", "SimulatedModel(refresh='all', ...) and course.agent(model, stack=..., "
                  "settings=load_settings(cache_prefix_ttl='5m')); waits 290, 290, 301")
def _06_4(course: Course, conversation: Any = None,
          predicted: Sequence[int] | None = None) -> str:
    model, responses = _conversation(conversation, "conversation")
    if model.refresh != "all":
        raise NotYet(f"the model reads refresh={model.refresh!r}: pass refresh='all'")
    traces = model.traces[-3:]
    waits = [b - a for a, b in pairwise(t.started for t in model.traces[-4:])]
    if len(traces) < 3 or waits != [290, 290, 301]:
        raise NotYet(f"the last three turns waited {waits}: wait 290, 290 and 301 s")
    entries = model.store.for_model(model.name)
    if entries[traces[-1].keys[traces[-1].breakpoints[0]]].ttl != "5m":
        raise NotYet("the prefix entry lives 1 hour: load_settings(cache_prefix_ttl='5m')")
    # Under refresh='all' a hit on the prefix (or a new write) gives it a full 5 minutes again.
    left = [300 if {t.breakpoints[0]} & {*t.hits, *t.writes} else None for t in traces[:2]]
    read = responses[-1].usage.cache_read_input_tokens
    if predicted is None or list(predicted) != [*left, read]:
        raise NotYet(f"pass predicted=[seconds left after turn 11, after turn 12, tokens turn 13 "
                     f"reads]; you predicted {predicted}")
    return (f"each ordinary call refreshed the prefix entry to 300 s, and turn 13, 301 s later, "
            f"read {read} tokens")


# --- 07 subagents and tenants --------------------------------------------------------------------


@exercise("07.1", "save a 'writer' agent with its own memory, add it to lead's subagents, "
                  "script lead to call task on both")
def _07_1(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    config = course.owner.get_agent()
    if "writer" not in config.subagents:
        raise NotYet("writer is not among lead's subagents")
    tasks = [a.get("agent") for n, a, _, err in _tool_results(run) if n == "task" and not err]
    if not {"writer", "researcher"} <= set(tasks):
        raise NotYet(f"lead called task on {tasks}; it should call both")
    for child in ("writer", "researcher"):
        try:
            memory = course.backend(child).read("/memories/AGENTS.md").content
        except FileNotFound:
            raise NotYet(f"{child} has no /memories/AGENTS.md") from None
        if any(memory in b.text for r in run.requests for b in r.system):
            raise NotYet(f"{child}'s memory is in one of lead's requests")
    return "lead delegated to both; neither subagent's memory is in any of lead's requests"


@exercise("07.2", "task with {'agent': 'stranger', 'description': ...}")
def _07_2(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    refused = [c for n, a, c, err in _tool_results(run) if n == "task" and err
               and a.get("agent") == "stranger"]
    if not refused:
        raise NotYet("no refused task call for 'stranger'")
    if run.stop_reason != "final":
        raise NotYet("the run did not finish")
    return f"the model got a tool error and the run went on: {refused[0]!r}"


@exercise("07.3", "with course.db.tenant(B) as conn: conn.execute(YOUR_SQL) — try a join, a "
                  "subquery, EXISTS; RLS filters rows before your query sees them")
def _07_3(course: Course, sql: str | None = None, tenant_b: str = "nb-07-b") -> str:
    if not sql or "agent_files" not in sql:
        raise NotYet("pass your counting query as sql='SELECT ... agent_files ...'")
    counts = {}
    for tenant in (course.tenant, tenant_b):
        with course.db.tenant(tenant) as conn:
            row = conn.execute(sql.replace("%", "%%")).fetchone()
        counts[tenant] = 0 if row is None or row[0] is None else int(row[0])
    if counts[course.tenant] == 0:
        raise NotYet("your query counts nothing even in tenant A: it must count A's files")
    if counts[tenant_b] != 0:
        raise NotYet(f"tenant B counted {counts[tenant_b]} of A's rows: that would be a real "
                     "leak, please report it")
    return f"tenant A counts {counts[course.tenant]}, tenant B counts 0 with the same query"


from hango import exercise_checks_0809  # noqa: E402,F401  registers 08 and 09
