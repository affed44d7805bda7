"""Checks for notebook 10: the order lesson under automatic prefix caching."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hango.exercises._core import NotYet, exercise

if TYPE_CHECKING:
    from hango.notebook import Course

SHAPES = {"block16": 16, "openai": "openai"}  # the two granularities the exercise compares


def _automatic(conversation: Any, name: str) -> tuple[Any, list[Any]]:
    """The model and responses of a notebook-10 conversation on the automatic regime."""
    model: Any = getattr(conversation, "model", None)
    responses = getattr(conversation, "responses", None)
    if not hasattr(model, "prefix_traces") or not isinstance(responses, list) or not responses:
        raise NotYet(f"no conversation yet: pass what experiment(...) returned as {name}=...")
    if model.caching != "automatic":
        raise NotYet(f"{name} ran on caching={model.caching!r}: pass caching='automatic'")
    request = model.calls[-1][0]
    at = next((i for i, b in enumerate(request.system) if b.source.startswith("/memories/")), None)
    if at is None or request.system_breakpoint is None or at <= request.system_breakpoint:
        raise NotYet(f"in {name}, memory is not after the breakpoint: use STACKS['default']")
    return model, responses


@exercise("10.1", "Predict the first read after a memory edit under automatic prefix caching",
          answer="runs={'block16': experiment(...), 'openai': experiment(...)}, "
                 "predicted={'block16': tokens read, 'openai': tokens read}",
          hint="SimulatedModel(caching='automatic', rules=PrefixRules(16), ...) and "
               "PrefixRules('openai'); the first edit call reads the longest cut below the "
               "first changed token")
def _10_1(course: Course, runs: dict[str, Any] | None = None,
          predicted: dict[str, int] | None = None) -> str:
    if not isinstance(runs, dict) or set(runs) != set(SHAPES):
        raise NotYet(f"pass the two conversations as runs={{'block16': ..., 'openai': ...}}; "
                     f"got {sorted(runs) if isinstance(runs, dict) else runs!r}")
    actual, changed = {}, {}
    for name, granularity in SHAPES.items():
        model, responses = _automatic(runs[name], f"runs[{name!r}]")
        if model.rules.granularity != granularity:
            raise NotYet(f"runs[{name!r}] used granularity {model.rules.granularity!r}, not "
                         f"{granularity!r}")
        edit = next((i for i, t in enumerate(model.prefix_traces) if t.changed_at is not None),
                    None)
        if edit is None:
            raise NotYet(f"runs[{name!r}] has no call after a memory edit: edit memory between "
                         "two turns")
        actual[name] = responses[edit].usage.cache_read_input_tokens
        changed[name] = model.prefix_traces[edit].changed_at
    if predicted != actual:
        raise NotYet(f"predict what the first call after the edit reads, per granularity, as "
                     f"predicted={{...}}; you predicted {predicted}")
    return (f"the prompt changed at token {changed['openai']}: 16-token blocks read "
            f"{actual['block16']} tokens, OpenAI's 1,024 + 128-token steps read {actual['openai']}")
