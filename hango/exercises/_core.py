"""The exercises' machinery: the registry, :func:`check`, and what a run shows (helpers every
notebook's checks use). The checks themselves live one module per notebook or two."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hango.agents import AgentConfig, save_agent
from hango.fs.backend import PostgresBackend
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
