"""The checks of notebooks 08 (debugging with traces) and 09 (agent-written memory).

Registered with the same ``@exercise`` decorator as the others, so ``check("08.1", course, ...)``
works once :mod:`hango.exercises` is imported. Each check reads what the learner's run left in
the real system: the spans the in-memory OpenTelemetry SDK finished (``course.telemetry``), the
``runs`` and ``proposals`` rows in PostgreSQL, the files the API serves.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from hango.agent import proposals as proposal_store
from hango.agent import runs as run_store
from hango.api.client import ApiError
from hango.exercises._core import NotYet, _index_text, _run, exercise
from hango.models.simulated import min_cacheable_tokens

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from hango.agent.runtime import RunResult
    from hango.notebook import Course


def _spans_of(course: Course, trace_id: str, run_id: str) -> list[ReadableSpan]:
    """The finished spans of one run (one trace), in the order they ended."""
    spans = [s for s in course.telemetry.spans() if f"{s.context.trace_id:032x}" == trace_id]
    if not trace_id or not spans:
        raise NotYet(f"course.telemetry has no span of {run_id}: run it again after your last "
                     "course.telemetry.clear()")
    return spans


def _events(spans: list[ReadableSpan]) -> list[tuple[str, str, dict[str, Any]]]:
    """(span name, event name, attributes) of every span event of a run."""
    return [(s.name, e.name, dict(e.attributes or {})) for s in spans for e in s.events]


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _one(spans: list[ReadableSpan], name: str) -> Any:
    return next(s for s in spans if s.name == name)


# --- 08 debugging with traces --------------------------------------------------------------------


def _memory_load(course: Course, result: RunResult | None, label: str) -> tuple[Any, list[str]]:
    """A run's ``agent.memory_load`` span and the paths its ``agent.memory_missing`` events name."""
    run = _run(result, label)
    span = _one(_spans_of(course, run.trace_id, run.run_id), "agent.memory_load")
    missing = [str(e.attributes.get("path")) for e in span.events
               if e.name == "agent.memory_missing" and e.attributes]
    return span, missing


@exercise("08.1", "Find a missing source from the span events",
          answer="missing=, fixed=: the two RunResults; predicted=a whole number, fixed's "
                 "hango.memory.bytes",
          hint="configure two sources with put_agent, run without writing the second: "
               "agent.memory_missing sits under agent.memory_load; write it, run again")
def _08_1(course: Course, missing: RunResult | None = None, fixed: RunResult | None = None,
          predicted: int | None = None) -> str:
    span, names = _memory_load(course, missing, "missing")
    names = [p for p in names if p != "/memories/AGENTS.md"]
    if not names:
        raise NotYet("the first run's agent.memory_load has no agent.memory_missing event for a "
                     "second source: configure one and do not write it yet")
    path = names[0]
    after, still = _memory_load(course, fixed, "fixed")
    if path in still:
        raise NotYet(f"{path} is still missing in the second run: write it through the files API")
    if path not in after.attributes.get("hango.memory.sources", ()):
        raise NotYet(f"the second run did not load {path}: is it still in the agent's memory?")
    before, now = span.attributes["hango.memory.bytes"], after.attributes["hango.memory.bytes"]
    if predicted != now:
        raise NotYet(f"pass your prediction of the second run's hango.memory.bytes as "
                     f"predicted=N; you predicted {predicted}")
    size = {e.path: e.size for e in course.owner.ls("/memories/")}.get(path, 0)
    grew = f"exactly the size of {path}" if now - before == size else \
        f"{now - before} bytes for a {size}-byte file (comments are stripped; the cap may cut)"
    return (f"agent.memory_missing path={path} under agent.memory_load; once written, "
            f"hango.memory.bytes went {before} -> {now}: {grew}")


@exercise("08.2", "Find why the read ratio is zero",
          answer="result=the RunResult, reason=the chat span's hango.cache.miss_reason (a string), "
                 "input_tokens=a whole number",
          hint="put_agent with system_prompt='You are a helpful agent.', then a SimulatedModel that calls"
               " ls and answers; read hango.cache.miss_reason on the chat spans")
def _08_2(course: Course, result: RunResult | None = None, reason: str | None = None,
          input_tokens: int | None = None) -> str:
    run = _run(result)
    spans = _spans_of(course, run.trace_id, run.run_id)
    chats = [s for s in spans if s.name.startswith("chat ")]
    if len(chats) < 2 or not any(s.name == "execute_tool ls" for s in spans):
        raise NotYet(f"the run made {len(chats)} model call(s): script an ls call, then an answer")
    if any(_attrs(s).get("hango.cache.read_ratio") for s in chats):
        raise NotYet("a chat span read from the cache: shorten the agent's system_prompt")
    first = _attrs(chats[0])
    actual = first.get("hango.cache.miss_reason")
    if reason != actual:
        raise NotYet(f"pass the chat spans' hango.cache.miss_reason as reason='...'; you said "
                     f"{reason!r}")
    tokens = first["gen_ai.usage.input_tokens"]
    minimum = min_cacheable_tokens(str(first["gen_ai.request.model"]))
    if input_tokens != tokens:
        raise NotYet(f"pass the first chat span's gen_ai.usage.input_tokens as input_tokens=N; "
                     f"you said {input_tokens}")
    return (f"{actual}: the first prompt is {tokens} tokens, {minimum - tokens} short of the "
            f"{minimum}-token minimum, so nothing is written and nothing can be read")


@exercise("08.3", "Find the skill that hides another",
          answer="result=the RunResult, winner=the path the index lists (a string), span_event=True or "
                 "False",
          hint="write /skills/team/csv/SKILL.md with name: csv, run, read the index line for csv and "
               "RunResult.warnings; then look for an event in the span tree")
def _08_3(course: Course, result: RunResult | None = None, winner: str | None = None,
          span_event: bool | None = None) -> str:
    run = _run(result)
    line = next((x for x in _index_text(run).splitlines() if x.startswith("- csv ")), None)
    if line is None:
        raise NotYet("the run's skills index has no csv skill")
    said = [w for w in run.warnings if w.startswith("skill 'csv'") and " overrides " in w]
    if not said:
        raise NotYet("no warning says one csv overrides another: write a second SKILL.md with "
                     "name: csv")
    shown, hidden = said[0].split(": ", 1)[1].split(" overrides ")
    if winner is None or f"({winner})" not in line:
        raise NotYet(f"pass the path of the csv skill the index lists as winner='...'; you said "
                     f"{winner!r}")
    named = any(hidden in str(attributes) or "overrid" in event
                for _, event, attributes in _events(_spans_of(course, run.trace_id, run.run_id)))
    if span_event is not named:
        raise NotYet("is the override in a span event? Look at every * line of the run's "
                     "span tree and pass span_event=True or False")
    where = ("and in a span event, so a trace viewer shows it too" if named else
             "and in the log, but in no span event: in Grafana alone you would see only "
             "hango.skills.count")
    return f"{shown} hides {hidden} (the later path wins); it is said in RunResult.warnings {where}"


# --- 09 agent-written memory -----------------------------------------------------------------


# On a workshop's shared server (``start(..., http_only=True)``) the runs, the proposals and the
# spans are the server's: the checks read the first two over HTTP, and skip what only spans show.


def _http_run(course: Course, run: Any, name: str) -> dict[str, Any]:
    """The ``runs`` row of a run made over HTTP (``course.member.run(...)`` returns its dict)."""
    if not isinstance(run, dict) or "run_id" not in run:
        raise NotYet(f"no run yet: pass what course.member.run(...) returned as {name}=...")
    try:
        if course.on_server:
            out = course.member.get_run(run["run_id"])
            return {"run_id": out["run_id"], "status": out["status"], "result": out}
        return run_store.load(course.db, course.tenant, run["run_id"])
    except (run_store.RunNotFound, ApiError):
        raise NotYet(f"{run['run_id']} is not in this tenant's runs table") from None


def _proposals(course: Course) -> list[Any]:
    """Every proposal of the course's agent, in any status, with its content."""
    if course.on_server:
        return [SimpleNamespace(**course.owner.proposal(p["proposal_id"]))
                for p in course.owner.proposals("all")]
    return proposal_store.list_proposals(course.db, course.tenant, course.agent_id, None)


def _proposal_of(course: Course, run: dict[str, Any], name: str) -> Any:
    found = [p for p in _proposals(course) if p.run_id == run["run_id"]]
    if not found:
        raise NotYet(f"{name} made no proposal: run it in ask mode with 'Remember: ...'")
    return found[0]


@exercise("09.1", "Refuse an agent's write again",
          answer="run=the dict course.member.run(...) returned in refuse mode",
          hint="course.owner.put_agent(course.owner.get_agent().model_copy(update={'reserved_writes': "
               "'refuse'})), then course.member.run('Remember: ...')")
def _09_1(course: Course, run: Any = None) -> str:
    row = _http_run(course, run, "run")
    if any(p.run_id == row["run_id"] for p in _proposals(course)):
        raise NotYet(f"{row['run_id']} made a proposal: the agent is still in ask mode")
    text = row["result"].get("text", "")
    if course.on_server:  # the spans are the server's: the run's answer is what is seen here
        if row["status"] != "done" or "reserved prefix" not in text:
            raise NotYet(f"{row['run_id']} is {row['status']} and its answer names no refused "
                         f"write: {text!r}")
        return f"{row['run_id']} is done with no proposal, and the agent read: {text!r}"
    spans = _spans_of(course, row["result"].get("trace_id", ""), row["run_id"])
    writes = [s for s in spans if s.name in ("execute_tool write_file", "execute_tool edit_file")]
    if not writes:  # the model edits a memory file that exists, and writes one that does not
        raise NotYet(f"{row['run_id']} made no write_file or edit_file call: ask it to "
                     "'Remember: ...'")
    if row["status"] != "done" or not _attrs(writes[0]).get("hango.tool.error"):
        raise NotYet(f"{row['run_id']} is {row['status']}, its {writes[0].name.split()[-1]} not refused")
    if "reserved prefix" not in text:
        raise NotYet(f"the tool result the model repeated does not name the rule: {text!r}")
    return (f"{row['run_id']} is done with no proposal; the {writes[0].name.split()[-1]} span has "
            f"hango.tool.error=True and the agent read: {text.removeprefix('Tool said: ')!r}")


@exercise("09.2", "Decide two proposals on one file",
          answer="first=, second=: the dicts of two course.member.run(...), conflict=the ApiError of the "
                 "plain approve",
          hint="two course.member.run('Remember: ...') before any decision; approve the first; the "
               "second's 409 carries the diff: approve it with content= and base_version= of the file as "
               "it is now")
def _09_2(course: Course, first: Any = None, second: Any = None, conflict: Any = None) -> str:
    a = _proposal_of(course, _http_run(course, first, "first"), "first")
    b = _proposal_of(course, _http_run(course, second, "second"), "second")
    if a.path != b.path:
        raise NotYet(f"the proposals are on {a.path} and {b.path}: make both on one file")
    if a.base_version != b.base_version:
        raise NotYet(f"made against versions {a.base_version} and {b.base_version}: make the "
                     "second before you decide the first")
    if getattr(conflict, "status", None) != 409 or b.proposal_id not in str(conflict):
        raise NotYet(f"pass the ApiError the plain approve of {b.proposal_id} raised as "
                     "conflict=...")
    if a.status != "approved" or b.status != "approved":
        raise NotYet(f"the first is {a.status}, the second {b.status}: approve both")
    if not b.edited or b.written_version != (a.written_version or 0) + 1:
        raise NotYet("approve the second with the merged content, against the current version")
    try:
        now = set(course.owner.read(a.path).splitlines())
    except Exception:
        raise NotYet(f"{a.path} is gone") from None
    lost = (set(a.content.splitlines()) | set(b.content.splitlines())) - now
    if lost:
        raise NotYet(f"{a.path} lacks {sorted(lost)}: merge both proposals' lines")
    base = "no file yet" if a.base_version is None else f"version {a.base_version}"
    return (f"both made against {base}; the first wrote version "
            f"{a.written_version}, the plain approve of the second got 409, and the merge wrote "
            f"version {b.written_version} with both lines")


@exercise("09.3", "Resume a run twice",
          answer="run=the dict of the run you resumed, second_resume=the ApiError of the second resume",
          hint="resume a decided run with course.member.resume(run_id), then again inside try/except "
               "ApiError")
def _09_3(course: Course, run: Any = None, second_resume: Any = None) -> str:
    row = _http_run(course, run, "run")
    if row["status"] != "done" or not row["result"].get("resumed"):
        raise NotYet(f"{row['run_id']} is {row['status']}: decide its proposal, then resume it")
    if getattr(second_resume, "status", None) != 409:
        raise NotYet("pass the ApiError the second resume raised as second_resume=...")
    if course.on_server:  # the spans are the server's: its answer to the second resume is seen
        return (f"{row['run_id']} was resumed and is done; the second resume got "
                f"{second_resume.status}: {second_resume.message}")
    resumed = [e for _, name, e in _events(list(course.telemetry.spans()))
               if name == "agent.run_resumed" and e.get("run_id") == row["run_id"]]
    if len(resumed) != 1:
        raise NotYet(f"course.telemetry has {len(resumed)} agent.run_resumed events for "
                     f"{row['run_id']}: resume after your last course.telemetry.clear()")
    return (f"one agent.run_resumed event for {row['run_id']}; the second resume got "
            f"{second_resume.status}: {second_resume.message}")
