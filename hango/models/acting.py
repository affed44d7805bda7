"""``acting_policy``: the offline model that acts, on a few conventions a learner can type.

Unlike ``echo_policy`` (the simulator's default, which never calls a tool), it acts from what a
real model sees (the prompt, memory frames, the skills index, the tools offered, tool results),
following :data:`CONVENTIONS` (``remember that ...``, a skill by name, a file, a subagent); a
prompt that matches none gets that table. ``hango serve`` runs it. Unlike a real model it plans
by rules: one tool call per turn, only tools offered, deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import unescape  # the frames escape &, ", < and > (memory.py, skills.py)

from hango.models.base import Request, ToolCall, ToolResult
from hango.models.simulated import Reply, tool_call

DEFAULT_MEMORY = "/memories/AGENTS.md"  # where to remember when no memory file is loaded yet
MAX_READS = 8  # files and skills one prompt may make it read; the rest are named, not read
CLIP = 300  # characters of a file or an answer quoted back


# The published table: (convention, what you type, what the model does), in the order tried.
CONVENTIONS: tuple[tuple[str, str, str], ...] = (
    ("remember", "`remember that …`, `please note for the future that …`, `don't forget …`, "
     "`keep in mind …`, `from now on …`",
     "adds `- …` to its memory file (the first `<memory>` block it sees, else "
     "`/memories/AGENTS.md`) with `edit_file`, or `write_file` for a new file: in ask mode that "
     "is a proposal, in refuse mode a refusal"),
    ("write a skill", "`create a skill named NAME that …` (`… using the tools read_file, ls`)",
     "writes `/skills/NAME/SKILL.md` with `write_file`, a proposal or a refusal as above"),
    ("delegate", "`ask NAME to …`, `tell NAME to …`, `delegate to NAME: …`",
     "calls `task` with that subagent and the rest of the sentence, then says what it answered"),
    ("use a skill", "a skill's name from its skills index (`use the pdf skill …`)",
     "`read_file` of that skill's `SKILL.md` before it answers"),
    ("read a file", "an absolute path (`/notes/todo.md`; a folder ends with `/`)",
     "`read_file` (a folder: `ls`), then says what it found"),
    ("recall", "`what do you remember?`, `what do you know about me?`",
     "answers from its memory blocks, with no tool call"),
)


def conventions_table() -> str:
    """The table as Markdown: the model's help answer, and the README's and glossary's copy."""
    rows = [f"| {name} | {typed} | {does} |" for name, typed, does in CONVENTIONS]
    return "\n".join(["| convention | you type | it does |", "|---|---|---|", *rows,
                      "| (anything else) | | answers with this table |"])


HELP = ("I am hango's offline model: I act on a few conventions, not on free text. The first "
        "row that matches your prompt decides (a skill and files named together are all read):"
        "\n\n" + conventions_table())


_MEMORY_FRAME = re.compile(r'\A<memory path="([^"]*)">\n(.*)\n</memory>\Z', re.DOTALL)
_INDEX_LINE = re.compile(r"^- (?P<name>.+?) — (?P<description>.*) \((?P<path>/[^()]*)\)$")
_CUT = re.compile(r"\n\[\.\.\. (?:truncated|left out): ")


@dataclass(frozen=True)
class Seen:
    """A request as the model reads it: the prompt, its memory, its skills, its tools, and the
    calls it made since the prompt with their results."""

    prompt: str
    memory: tuple[tuple[str, str], ...]  # (path, text) per <memory> block, in prompt order
    skills: tuple[tuple[str, str], ...]  # (name, SKILL.md path) per index line
    tools: dict[str, str]  # name -> description, of the tools offered
    made: tuple[tuple[ToolCall, ToolResult | None], ...]

    @classmethod
    def of(cls, request: Request) -> Seen:
        at = max((i for i, m in enumerate(request.messages)
                  if m.role == "user" and m.text.strip()), default=None)
        prompt = "" if at is None else request.messages[at].text
        turn = request.messages[at + 1:] if at is not None else ()
        results = {r.call_id: r for m in turn for r in m.tool_results}
        made = tuple((c, results.get(c.id)) for m in turn for c in m.tool_calls)
        memory, skills = [], []
        for block in request.system:
            frame = _MEMORY_FRAME.match(block.text)
            if frame:
                memory.append((unescape(frame[1]), frame[2]))
            elif block.text.startswith("## Skills\n"):
                for line in block.text.splitlines()[1:]:
                    found = _INDEX_LINE.match(line)
                    if found:
                        skills.append((unescape(found["name"]), unescape(found["path"])))
        return cls(prompt, tuple(memory), tuple(skills),
                   {t.name: t.description for t in request.tools}, made)


Done = Sequence[tuple[ToolCall, ToolResult | None]]


@dataclass(frozen=True)
class Plan:
    """What a convention decided: the calls to make in order, what to say with the first one,
    and the answer once they are made. ``now``: an answer at once, no call (a tool is missing)."""

    calls: tuple[ToolCall, ...] = ()
    say: str = ""
    answer: Callable[[Done], str] = lambda done: ""
    now: str | None = None


def acting_policy(request: Request) -> Reply:
    """The next reply: the next call of the first convention that matches, else its answer."""
    seen = Seen.of(request)
    for convention in (_remember, _write_skill, _delegate, _read, _recall):
        plan = convention(seen)
        if plan is None:
            continue
        if plan.now is not None:
            return Reply(plan.now)
        step = len(seen.made)
        if step < len(plan.calls):
            return Reply(plan.say if step == 0 else "", (plan.calls[step],))
        return Reply(plan.answer(seen.made))
    return Reply(HELP)


# Where a request starts: the start of the prompt or of a sentence, then any politeness.
_START = r"(?:^|(?<=[.!?\n])\s*)"
_POLITE = (r"(?:(?:please|pls|kindly|ok(?:ay)?|hey|hi|so|and|also|now)\b[\s,!]*"
           r"|(?:can|could|would|will)\s+you\b[\s,]*(?:please\b[\s,]*)?"
           r"|i(?:\s+(?:want|need|would\s+like)|['’]d\s+like)\s+you\s+to\s+)*")
_LINK = r"(?P<link>\s+that\b|\s+this\b|\s*:)?[\s,:\-–—]*"


def _request(*verbs: str) -> re.Pattern[str]:
    return re.compile(_START + _POLITE + "(?:" + "|".join(verbs) + ")" + _LINK + r"(?P<rest>.*)",
                      re.IGNORECASE | re.DOTALL)


_REMEMBER = _request(
    r"remember\b(?:\s+to\b)?",
    r"(?:don['’]?t|do\s+not|never)\s+forget\b(?:\s+to\b)?",
    r"(?:note|write|jot)(?:\s+(?:this|that|it))?(?:\s+down)?\s+for\s+"
    r"(?:the\s+future|later|next\s+time)\b",
    r"(?:note|write|jot)\s+down\b",
    r"(?:make|take)\s+a\s+note(?:\s+of)?\b",
    r"(?:keep|bear)\s+in\s+mind\b",
    r"memori[sz]e\b",
    r"(?:save|store|add|put|write|record)(?:\s+(?:this|that|it))?\s+(?:to|in|into)\s+"
    r"(?:your\s+|the\s+)?memory\b",
    r"for\s+future\s+reference\b",
    r"(?=from\s+now\s+on\b)")  # the fact keeps its "from now on"
_WRITE_SKILL = re.compile(
    _START + _POLITE + r"(?:create|write|add|make|save|learn|draft)\s+(?:me\s+)?(?:a\s+|the\s+)?"
    r"(?:new\s+)?skill\b\s*(?:named\b|called\b|:)?\s*(?P<name>[a-z0-9][a-z0-9-]{0,63})\b"
    r"(?P<rest>.*)", re.IGNORECASE | re.DOTALL)
_SKILL_TOOLS = re.compile(
    r"(?:,?\s*(?:using|with)\s+(?:the\s+)?tools?\s+|\s*\(?\btools?\s*[:=]\s*)"
    r"(?P<tools>[A-Za-z_][\w-]*(?:\s*(?:,|\band\b|\s)\s*[A-Za-z_][\w-]*)*)\)?[.!]?\s*$",
    re.IGNORECASE)
_DELEGATE = re.compile(
    _START + _POLITE + r"(?:(?:ask|tell)\s+(?:the\s+|my\s+|your\s+)?(?P<a>[a-z0-9][a-z0-9_-]*)"
    r"(?:\s+to\b|\s*:)|(?:delegate|hand)(?:\s+(?:this|it))?(?:\s+(?:over|off))?\s+to\s+"
    r"(?:the\s+|my\s+|your\s+)?(?P<b>[a-z0-9][a-z0-9_-]*)\b[\s,:]*)\s*(?P<rest>.*)",
    re.IGNORECASE | re.DOTALL)
_RECALL = re.compile(
    r"\bwhat\b[^.!?]*\byou\s+(?:remember|recall|know)\b|\bwhat(?:['’]s|\s+is)\s+in\s+your\s+memory\b"
    r"|\b(?:do|did)\s+you\s+(?:remember|recall)\b|\bshow\s+(?:me\s+)?your\s+memory\b",
    re.IGNORECASE)
_PATH = re.compile(r"(?<![\w/.:~-])/[^\s\"'`<>()\[\]{},;]+")
_NOT_AN_AGENT = frozenset({"me", "you", "us", "them", "him", "her", "it", "this", "that", "someone",
                           "somebody", "anyone", "everyone", "yourself", "myself", "people",
                           "whether", "if", "why", "how", "what", "for", "about"})
_NOT_A_SKILL_NAME = frozenset({"named", "called", "that", "which", "to", "for", "about", "with"})


def _fold(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, width: int = CLIP) -> str:
    text = _fold(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _said(result: ToolResult | None) -> str:
    """A tool result as the answer quotes it."""
    return "no result" if result is None else _clip(result.content.removeprefix("error: "))


def _fact(seen: Seen) -> str | None:
    """What the prompt asks to remember, or None. A question ("can you remember things?") is
    not a request, unless it links its fact with "that" or a colon; then its "?" is the
    request's ("could you remember that I like tea?" remembers "I like tea.")."""
    found = _REMEMBER.search(seen.prompt)
    if found is None:
        return None
    fact = _fold(found["rest"]).strip(" \"'“”")
    if not fact.strip(".!?,;: ") or (fact.endswith("?") and found["link"] is None):
        return None
    return fact[:-1] + "." if fact.endswith("?") else fact


# --- The conventions -----------------------------------------------------------------------------


def _outcome(done: Done, ok: str, failed: str) -> str:
    """``ok`` or ``failed`` (each says what was tried), then what the one call's tool said."""
    result = done[0][1]
    return f"{failed if result is None or result.is_error else ok} The tool said: {_said(result)}"


def _say(seen: Seen, proposal: str, write: str) -> str:
    """What it says with a write: in ask mode the tools' descriptions say it is a proposal."""
    if "becomes a proposal" in seen.tools.get("write_file", ""):
        return f"I propose {proposal}; an owner or admin decides before it is written."
    return f"I will {write}."


def _remember(seen: Seen) -> Plan | None:
    fact = _fact(seen)
    if fact is None:
        return None
    path, text = seen.memory[0] if seen.memory else (DEFAULT_MEMORY, None)
    line = f"- {fact}"
    if text is not None and line in text.splitlines():
        return Plan(now=f"I already remember that: “{fact}” is in {path}.")
    if text is not None and _CUT.search(text):
        return Plan(now=f"I cannot add to {path}: it is cut at HANGO_MEMORY_MAX_BYTES, so I do "
                        "not see its end. An owner or admin can shorten it.")
    if text is None or not text.strip():
        call = tool_call("write_file", {"path": path, "content": f"# Memory\n\n{line}\n"})
    else:  # add after the last lines, anchored on as few of them as occur once
        anchor = _unique_tail(text)
        call = tool_call("edit_file", {"path": path, "old_string": anchor,
                                       "new_string": f"{anchor}\n{line}"})
    if call.name not in seen.tools:
        return Plan(now=f"I cannot remember that: {call.name} is not among my tools.")
    return Plan((call,), _say(seen, f"adding “{fact}” to {path}", f"add “{fact}” to {path}"),
                lambda done: _outcome(done, f"Remembered “{fact}” in {path}.",
                                      f"I could not remember “{fact}”."))


def _unique_tail(text: str) -> str:
    """The shortest run of last lines that occurs once in ``text``: an edit_file anchor."""
    lines = text.rstrip("\n").split("\n")
    for start in range(len(lines) - 1, -1, -1):
        tail = "\n".join(lines[start:])
        if tail.strip() and text.count(tail) == 1:
            return tail
    return text.rstrip("\n")


def _write_skill(seen: Seen) -> Plan | None:
    found = _WRITE_SKILL.search(seen.prompt)
    if found is None:
        return None
    name = found["name"].lower()
    if name in _NOT_A_SKILL_NAME:
        return Plan(now="Name the skill: create a skill named NAME that …")
    rest = _fold(found["rest"])
    tools_at = _SKILL_TOOLS.search(rest)
    what = (rest[: tools_at.start()] if tools_at else rest).strip(" .,:;-")
    what = re.sub(r"^(?:that|which|to|for|who)\s+", "", what, flags=re.IGNORECASE)
    what = (what[:1].upper() + what[1:]).rstrip(".") + "." if what else (
        f"The {name} skill, written at a user's request.")
    quoted = what[:1024].replace("\\", "\\\\").replace('"', '\\"')
    head = [f"name: {name}", f'description: "{quoted}"']
    if tools_at:
        tools = [t for t in re.split(r"\s*(?:,|\band\b|\s)\s*", tools_at["tools"]) if t]
        head.append(f"allowed_tools: [{', '.join(tools)}]")
    path = f"/skills/{name}/SKILL.md"
    content = "---\n" + "\n".join(head) + f"\n---\n# {name}\n\n{what}\n"
    if "write_file" not in seen.tools:
        return Plan(now=f"I cannot write {path}: write_file is not among my tools.")
    say = _say(seen, f"the skill {name} ({path})", f"write the skill {name} ({path})")
    return Plan((tool_call("write_file", {"path": path, "content": content}),), say,
                lambda done: _outcome(done, f"Wrote the skill {name} ({path}).",
                                      f"I could not write the skill {name}."))


def _delegate(seen: Seen) -> Plan | None:
    found = _DELEGATE.search(seen.prompt)
    if found is None:
        return None
    agent, task = (found["a"] or found["b"]).lower(), _fold(found["rest"])
    if agent in _NOT_AN_AGENT or not task:
        return None
    if "task" not in seen.tools:
        return Plan(now=f"I cannot hand this to {agent}: task is not among my tools (this "
                        "agent has no subagents in its config, or task is not in its allowlist).")

    def answer(done: Done) -> str:
        result = done[0][1]
        if result is None or result.is_error:
            return f"I could not hand this to {agent}. The tool said: {_said(result)}"
        return f"{agent} answered: {_said(result)}"

    return Plan((tool_call("task", {"agent": agent, "description": task}),),
                f"I will ask {agent}.", answer)


def _read(seen: Seen) -> Plan | None:
    """Skills named in the prompt first (read before answering), then the paths it names."""
    wanted: dict[str, str] = {}  # path -> the skill's name, or "" for a plain file
    for name, path in seen.skills:
        if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", seen.prompt, re.IGNORECASE):
            wanted.setdefault(path, name)
    for found in _PATH.finditer(seen.prompt):
        if len(found[0].rstrip(".,:!?")) > 1:
            wanted.setdefault(found[0].rstrip(".,:!?"), "")
    if not wanted:
        return None
    calls = [tool_call("ls" if p.endswith("/") else "read_file", {"path": p})
             for p in list(wanted)[:MAX_READS]]
    lacking = [c for c in calls if c.name not in seen.tools]
    if lacking:
        return Plan(now=f"I would read {lacking[0].arguments['path']}, but {lacking[0].name} is "
                        "not among my tools.")
    left = list(wanted)[MAX_READS:]

    def answer(done: Done) -> str:
        said = []
        for call, result in done:
            path = str(call.arguments.get("path", ""))
            if result is None or result.is_error:
                verb = "list" if call.name == "ls" else "read"
                said.append(f"I could not {verb} {path}: {_said(result)}")
            elif wanted.get(path):
                said.append(f"I read the skill {wanted[path]} ({path}) before answering; it "
                            f"says: “{_clip(_body(result.content))}”")
            elif call.name == "ls":
                said.append(f"{path} holds: {_clip(', '.join(result.content.splitlines()))}")
            else:
                said.append(f"{path} says: “{_clip(result.content)}”")
        if left:
            said.append(f"I read at most {MAX_READS} files for one prompt; not read: "
                        f"{_clip(', '.join(left))}.")
        return " ".join(said)

    return Plan(tuple(calls), "", answer)


def _body(skill_md: str) -> str:
    """A SKILL.md without its frontmatter (the closing ``---`` is the first one after the top)."""
    parts = skill_md.split("\n---", 1)
    return parts[1].lstrip("-") if skill_md.startswith("---") and len(parts) == 2 else skill_md


def _recall(seen: Seen) -> Plan | None:
    if not _RECALL.search(seen.prompt):
        return None
    if not seen.memory:
        return Plan(now="My memory is empty: no memory file was loaded for this run.")
    return Plan(now=" ".join(f"My memory ({path}) says: “{_clip(text) or '(empty)'}”"
                             for path, text in seen.memory))
