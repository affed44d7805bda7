"""Generated broken `SKILL.md` files beside good ones: every run completes with every good skill,
every refused file counted and named; generated skills, sources, allowlists and tool calls: a tool
executes only inside the allowlist and, once narrowing skills were read, inside their intersection.

Skills under stress: broken files never fail a run, and ``allowed_tools`` only ever narrows.

``tests/test_frontmatter_fuzz.py`` holds the parser to its contract in isolation (random bytes,
mutated corpus files, differential against PyYAML). This file checks what a *run* does with
what the parser is given, against the real database:

1. **Broken skills.** Generated broken ``SKILL.md`` files (mutated good ones, truncated heads,
   unclosed frontmatter, invalid UTF-8 written with SQL, NUL bytes, oversized heads) sit beside
   good skills; every run completes, every good skill is in the index, every file the parser
   refuses is counted and named in a warning, and nothing else is.
2. **Narrowing.** Generated skills (``allowed-tools``/``allowed_tools``, flow lists, block lists
   and strings, names outside the allowlist, duplicates, empty lists, absent keys) in generated
   sources read in a random order, with a random allowlist and a random sequence of tool calls by
   the scripted model. Every tool function is wrapped to record that it *executed*. The oracle,
   written from the rules and not from the code: a call executes exactly when its tool exists,
   is in the allowlist, and (once one or more narrowing skills were read) is in the
   intersection of their ``allowed_tools ∩ allowlist``. So the executed set is always a subset
   of the allowlist, and after a narrowing skill is read, of its effective set.

Examples: ``HANGO_FUZZ_EXAMPLES`` / 10 (at least 30) runs per property. A dedicated run::

    HANGO_FUZZ_EXAMPLES=3000 .venv/bin/pytest -q tests/test_reliability_skills.py
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from hango.agent.frontmatter import HEAD_BYTES, FrontmatterError, parse
from hango.agent.hooks import RunContext, Tool
from hango.agent.memory import MemoryMiddleware
from hango.agent.promptcache import PromptCache
from hango.agent.runtime import Agent
from hango.agent.skills import SkillsMiddleware
from hango.agent.stack import DefaultStack, Stack
from hango.agent.subagent import SubagentMiddleware
from hango.agent.tools import FILESYSTEM_TOOLS
from hango.agents import AgentConfig, create_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.base import ToolSpec
from hango.models.simulated import SimulatedModel, tool_call
from hango.telemetry import EVENT_SKILL_INVALID

EXAMPLES = int(os.environ.get("HANGO_FUZZ_EXAMPLES", "300"))
RUNS = settings(max_examples=max(30, EXAMPLES // 10), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
CORPUS = Path(__file__).resolve().parent / "data" / "skills-corpus" / "files"
CORPUS_FILES = [p.read_bytes() for p in sorted(CORPUS.rglob("SKILL.md"))][:200]


@pytest.fixture(scope="module")
def tenant_id(db: Database) -> str:
    return create_tenant(db, "rel-" + uuid.uuid4().hex[:12])


def fresh_agent(db: Database, tenant_id: str, config: AgentConfig | None = None) -> str:
    agent = "a" + uuid.uuid4().hex[:10]
    save_agent(db, tenant_id, agent, config or AgentConfig())
    return agent


def write_raw(db: Database, tenant_id: str, agent: str, path: str, data: bytes) -> None:
    """A file as raw bytes, the way a migration or a COPY could leave it (not only UTF-8)."""
    with db.admin() as conn:
        conn.execute(
            "INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
            " VALUES (%s, %s, %s, %s, %s)", [tenant_id, agent, path, data, len(data)])


def good_skill(name: str, description: str, tools: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{tools}---\n\n# {name}\n\nBODY\n"


def head_outcome(data: bytes) -> str | None:
    """The parser's verdict on the whole file's bytes: the name to index, or None to skip it.

    The runtime reads only a head of each file from the database (and decodes it); whatever it
    does, it must agree with the parser reading the file itself."""
    try:
        return parse(data).name
    except FrontmatterError:
        return None


# --- 1. broken skills never fail a run ---------------------------------------------------------

TEMPLATE = good_skill("mut", "A skill that the fuzzer breaks.", "allowed-tools: read_file ls\n")
JUNK = st.sampled_from([
    b"", b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\r", b"\t", b":", b": ",
    b"'", b'"', b"[", b"{", b"|", b">-", b"- ", b"---", b"...", b"&a ", b"*a", b"!!python/object ",
    b"\\", b"#", b"yes", b"~", b"\xe2\x80\xa8", b"\x85", b"\n  ", b"name: again\n",
    b"allowed_tools: [x]\n", b"description:\n",
]) | st.binary(max_size=8)


@st.composite
def broken_file(draw: st.DrawFn) -> bytes:
    """Mostly-broken SKILL.md bytes; some mutations stay valid, which the oracle allows for."""
    base = draw(st.sampled_from([TEMPLATE.encode(), *CORPUS_FILES[:50]]))
    kind = draw(st.sampled_from(["mutate", "truncate", "unclosed", "binary", "huge", "noname",
                                 "nul"]))
    if kind == "binary":
        return draw(st.binary(min_size=1, max_size=2000))
    if kind == "truncate":
        return base[: draw(st.integers(0, max(0, len(base) - 1)))]
    if kind == "unclosed":
        return base.replace(b"\n---\n", b"\n--\n", 1)  # the second marker is the first "\n---\n"
    if kind == "huge":  # a frontmatter that does not close inside the head
        return b"---\nname: huge\ndescription: " + b"x" * (HEAD_BYTES + 10) + b"\n---\n"
    if kind == "noname":
        return re.sub(rb"(?m)^name:.*\n", b"", base, count=1)
    if kind == "nul":
        return base.replace(b"description:", b"description: \x00", 1)
    lines = base.split(b"\n")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["insert", "delete", "duplicate", "indent"]))
        if op == "insert":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(JUNK) + lines[i][at:]
        elif op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        else:
            lines[i] = b" " * draw(st.integers(1, 3)) + lines[i]
    return b"\n".join(lines)


GOOD = {f"good-{i}": good_skill(f"good-{i}", f"Good skill number {i}.") for i in range(3)}


@RUNS
@given(st.lists(broken_file(), min_size=1, max_size=6))
def test_a_run_with_broken_skills_completes_with_the_good_ones(
    db: Database, tenant_id: str, broken: list[bytes]
) -> None:
    agent = fresh_agent(db, tenant_id)
    backend = PostgresBackend(db, tenant_id, agent)
    for name, text in GOOD.items():
        backend.write(f"/skills/{name}/SKILL.md", text)
    expected_invalid: set[str] = set()
    extra_names: set[str] = set()
    for j, data in enumerate(broken):
        path = f"/skills/broken-{j}/SKILL.md"
        write_raw(db, tenant_id, agent, path, data)
        outcome = head_outcome(data)
        if outcome is None:
            expected_invalid.add(path)
        else:
            extra_names.add(outcome)
    model = SimulatedModel(policy=[[tool_call("read_file", {"path": "/skills/good-0/SKILL.md"})],
                                   "done"])
    result = Agent(db, tenant_id, agent, model).run("use a skill")
    assert result.stop_reason == "final" and result.text == "done"
    (index,) = [b.text for b in result.requests[0].system if b.source == "skills"]
    for name in GOOD:
        if name not in extra_names:  # a mutated file could (in theory) reuse a good name
            assert f"- {name} — Good skill number" in index
    assert result.skills_count == len(set(GOOD) | extra_names)
    invalid = {e.attributes["path"] for e in result.events if e.name == EVENT_SKILL_INVALID}
    assert invalid == expected_invalid
    (read,) = [r for m in result.messages for r in m.tool_results]
    assert not read.is_error and "BODY" in read.content


def test_the_broken_kinds_are_reached() -> None:
    """The generator produces files the parser refuses for many different reasons."""
    samples = [TEMPLATE.encode()[:20], b"\xff\xfe---\n", TEMPLATE.encode().replace(b"\n---\n",
               b"\n--\n", 1), b"---\nname: huge\ndescription: " + b"x" * (HEAD_BYTES + 10)]
    assert all(head_outcome(s) is None for s in samples)
    assert head_outcome(TEMPLATE.encode()) == "mut"


# --- 2. narrowing: the executed set --------------------------------------------------------------

UNIVERSE = ["read_file", "write_file", "edit_file", "ls", "glob", "dangerous_tool", "shell"]
NOT_TOOLS = ["Bash(git:*)", "task", "web_fetch", "Read", "READ_FILE"]
ARGS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "/notes/n.md"},
    "write_file": {"path": "/notes/n.md", "content": "n"},
    "edit_file": {"path": "/notes/n.md", "old_string": "n", "new_string": "n"},
    "ls": {"path": "/"},
    "glob": {"pattern": "/**"},
    "dangerous_tool": {},
    "shell": {"cmd": "rm -rf /"},
}


@st.composite
def tools_key(draw: st.DrawFn) -> str:
    """An ``allowed-tools`` line in one of the forms the parser reads, or no key at all."""
    if draw(st.integers(0, 3)) == 0:
        return ""
    items = draw(st.lists(st.sampled_from(UNIVERSE + NOT_TOOLS), max_size=6))  # duplicates too
    key = draw(st.sampled_from(["allowed-tools", "allowed_tools"]))
    form = draw(st.sampled_from(["flow", "block", "string"]))
    if form == "flow":
        return f"{key}: [" + ", ".join(f"'{i}'" for i in items) + "]\n"
    if form == "block" and items:
        return f"{key}:\n" + "".join(f"  - '{i}'\n" for i in items)
    if not items:
        return f"{key}: []\n"
    return f"{key}: " + " ".join(items) + "\n"


@st.composite
def scenario(draw: st.DrawFn) -> dict[str, Any]:
    allowlist = draw(st.lists(st.sampled_from(UNIVERSE), unique=True, max_size=len(UNIVERSE)))
    if draw(st.integers(0, 3)) and "read_file" not in allowlist:
        allowlist.append("read_file")  # usually the agent can read its skills
    sources = draw(st.permutations(["/skills/", "/skills/team/", "/skills/ops/"]))
    sources = sources[: draw(st.integers(1, 3))]
    skills = []
    for i in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(["alpha", "beta", "gamma", f"s{i}"]))  # name clashes too
        source = draw(st.sampled_from(sources))
        path = f"{source}k{i}/SKILL.md"
        skills.append((path, good_skill(name, f"Skill {i}.", draw(tools_key()))))
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["skill", "skill", "allowed", "allowed", "allowed", "any"]))
        if kind == "skill":
            steps.append(("read_file", {"path": draw(st.sampled_from([p for p, _ in skills]))}))
        else:  # mostly tools the allowlist has: those are the ones only a skill can refuse
            pool = allowlist if kind == "allowed" and allowlist else [*UNIVERSE, "task"]
            name = draw(st.sampled_from(pool))
            steps.append((name, ARGS.get(name, {})))
    return {"allowlist": allowlist, "sources": sources, "skills": skills, "steps": steps}


def recording_stack(executed: list[str]) -> Callable[[Agent], Stack]:
    """The default stack, with every tool function wrapped to record that it ran."""

    def record(tool: Tool) -> Tool:
        def fn(ctx: RunContext, args: dict[str, Any]) -> str:
            executed.append(tool.spec.name)
            return tool.fn(ctx, args)
        return Tool(tool.spec, fn)

    class RecordingFilesystem:
        name = "filesystem"

        def tools(self, ctx: RunContext) -> tuple[Tool, ...]:
            return tuple(record(t) for t in FILESYSTEM_TOOLS)

    def build(agent: Agent) -> Stack:
        return DefaultStack(
            skills=SkillsMiddleware(max_skills=agent.settings.skills_max),
            filesystem=RecordingFilesystem(),
            subagents=SubagentMiddleware(agent),
            prompt_cache=PromptCache(),
            memory=MemoryMiddleware(max_bytes=agent.settings.memory_max_bytes),
        )

    return build


def declared_tools(text: str) -> tuple[str, ...] | None:
    return parse(text).allowed_tools


TWO_SKILLS = {  # read A then B: the callable set is A ∩ B, not B
    "allowlist": ["read_file", "ls", "write_file", "glob"], "sources": ["/skills/"],
    "skills": [("/skills/a/SKILL.md", good_skill("a", "A.", "allowed-tools: read_file ls glob\n")),
               ("/skills/b/SKILL.md", good_skill("b", "B.", "allowed_tools: [read_file, write_file,"
                                                 " glob, dangerous_tool]\n"))],
    "steps": [("read_file", {"path": "/skills/a/SKILL.md"}), ("write_file", ARGS["write_file"]),
              ("read_file", {"path": "/skills/b/SKILL.md"}), ("write_file", ARGS["write_file"]),
              ("ls", ARGS["ls"]), ("glob", ARGS["glob"]), ("dangerous_tool", {})],
}


@RUNS
@given(scenario())
@example(TWO_SKILLS)
def test_executed_tools_stay_inside_the_allowlist_and_the_skills_in_use(
    db: Database, tenant_id: str, case: dict[str, Any]
) -> None:
    allowlist = set(case["allowlist"])
    agent = fresh_agent(db, tenant_id, AgentConfig(tools=case["allowlist"],
                                                   skills=case["sources"]))
    backend = PostgresBackend(db, tenant_id, agent)
    backend.write("/notes/n.md", "n")
    for path, text in case["skills"]:
        backend.write(path, text)
    executed: list[str] = []
    extra = []
    for name in ("dangerous_tool", "shell"):
        def run(ctx: RunContext, args: dict[str, Any], name: str = name) -> str:
            executed.append(name)
            return f"{name} ran"
        extra.append(Tool(ToolSpec(name, "A tool no skill should unlock."), run))
    calls = [tool_call(name, args) for name, args in case["steps"]]
    model = SimulatedModel(policy=[*[[c] for c in calls], "done"])
    result = Agent(db, tenant_id, agent, model, stack=recording_stack(executed),
                   extra_tools=extra).run("go")
    assert result.stop_reason == "final"

    # the skills the run indexed (a later source, or a later path, wins a name)
    (index,) = [b.text for b in result.requests[0].system if b.source == "skills"] or [""]
    indexed = set(re.findall(r"\((/skills/[^()]*SKILL\.md)\)$", index, flags=re.M))
    texts = dict(case["skills"])

    # replay the rules over the calls in order; ``ran`` is what the recorder saw, in order
    outcomes = [r for m in result.messages for r in m.tool_results]
    assert len(outcomes) == len(calls)
    ran = iter(executed)
    active: set[str] | None = None
    provided = set(UNIVERSE)
    for call, outcome in zip(calls, outcomes, strict=True):
        should_run = (call.name in allowlist and call.name in provided
                      and (active is None or call.name in active))
        if should_run:
            assert next(ran) == call.name
            assert call.name in allowlist
            assert active is None or call.name in active
        else:
            assert outcome.is_error and outcome.content.startswith(("refused", "error: no tool"))
            if call.name in allowlist:
                event("refused by a skill in use")
        if should_run and call.name == "read_file" and not outcome.is_error:
            path = call.arguments["path"]
            declared = declared_tools(texts[path]) if path in indexed else None
            if declared is not None:
                effective = set(declared) & allowlist
                active = effective if active is None else active & effective
                event("narrowed" if active != allowlist else "narrowing read, nothing dropped")
    assert next(ran, None) is None  # nothing else executed
    assert set(executed) <= allowlist
