"""The exercises' machinery: the registry, :func:`check`, and what a run shows (helpers every
notebook's checks use). The checks themselves live one module per notebook or two."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hango.agents import AgentConfig, save_agent
from hango.fs.backend import PostgresBackend
from hango.models.base import Request

if TYPE_CHECKING:
    from hango.agent.runtime import RunResult
    from hango.db import Database


class Course(Protocol):
    """What a check needs of the notebooks' ``hango.notebook.Course`` (this module, which the
    notebook helper's progress imports, does not import it back)."""

    db: Database
    tenant: str
    learner: str

    def backend(self, agent_id: str | None = None) -> PostgresBackend: ...


class NotYet(Exception):
    """What the learner's work does not show yet (the check prints it with the hint)."""


# The notebooks, by the number their exercise ids start with (a test compares them with the files).
NOTEBOOKS: dict[str, str] = {
    "00": "setup and tour", "01": "paths and reserved prefixes",
    "02": "memory through the files API", "03": "skills index", "04": "broken frontmatter",
    "05": "allowed-tools narrowing", "06": "cache read ratio", "07": "subagents and tenants",
    "08": "debugging with traces", "09": "agent-written memory",
    "10": "any model prefix caching",
}


@dataclass(frozen=True)
class Exercise:
    """One exercise: its id (notebook number, then its place there), a title the chapter, the
    notebooks and :func:`progress` use, what to pass to its check, and a hint."""

    id: str
    title: str
    answer: str
    hint: str
    check: Callable[..., str]


EXERCISES: dict[str, Exercise] = {}


def exercise(exercise_id: str, title: str, answer: str,
             hint: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    def register(fn: Callable[..., str]) -> Callable[..., str]:
        EXERCISES[exercise_id] = Exercise(exercise_id, title, answer, hint, fn)
        return fn
    return register


def record(db: Database, learner: str, exercise_id: str, verified: str) -> None:
    """Keep a pass (the first one stays)."""
    with db.app() as conn:
        conn.execute("INSERT INTO exercise_passes (learner, exercise_id, verified)"
                     " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                     [learner, exercise_id, verified[:2000]])


def check(exercise_id: str, course: Course, **work: Any) -> None:
    """Check one exercise; print ``PASS ...``, or ``NOT YET ...`` with what to pass and a hint.

    Never raises. A pass is recorded for the course's learner (:func:`record`), where the next
    notebook's fresh start does not wipe it (:mod:`hango.exercises.progress` shows them)."""

    ex = EXERCISES[exercise_id]
    try:
        verified = ex.check(course, **work)
    except NotYet as missing:
        print(f"NOT YET {exercise_id}: {missing}\n  answer: {ex.answer}\n  hint: {ex.hint}")
        _to_the_room(course, exercise_id, False, str(missing))
        return
    print(f"PASS {exercise_id}: {verified}")
    _to_the_room(course, exercise_id, True, verified)
    try:
        record(course.db, course.learner, exercise_id, verified)
    except Exception as exc:  # a check never raises: the pass stands, unrecorded
        print(f"  (not recorded in your progress: {exc})")


def _to_the_room(course: Course, exercise_id: str, passed: bool, message: str) -> None:
    """With a shared server (``HANGO_SERVER_URL``), record the check in the learner's seat there,
    where the instructor's room view reads it."""
    shared = getattr(course, "shared", None)
    if shared is None:
        return
    try:
        shared.record(exercise_id, passed, message)
    except Exception as exc:  # a check never raises: the room just does not see this one
        print(f"  (not recorded on the shared server {shared.url}: {exc})")


# --- what the learner passed: the right kind of answer ------------------------------------------


def tool_names(value: Any, name: str) -> set[str]:
    """A set of tool names, as the learner gave it: a set, list or tuple of strings."""
    if isinstance(value, str):
        raise NotYet(f"{name} is the string {value!r}, not a set: write a set of tool names, "
                     "such as {'ls'}, or set() for none")
    if not isinstance(value, set | frozenset | list | tuple) or \
            not all(isinstance(v, str) for v in value):
        raise NotYet(f"{name} should be a set of tool names such as {{'ls'}}, got {value!r}")
    return set(value)


def ints(value: Any, name: str, count: int | None = None) -> list[int]:
    """A list of whole numbers (a bool is not one), of ``count`` items when given."""
    if isinstance(value, str) or not isinstance(value, list | tuple) or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise NotYet(f"{name} should be a list of whole numbers, got {value!r}")
    if count is not None and len(value) != count:
        raise NotYet(f"{name} should hold {count} numbers, it holds {len(value)}")
    return list(value)


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
