"""Checks for notebook 06: the prompt-cache read ratio and where memory sits."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from hango.exercises._core import NotYet, exercise, ints

if TYPE_CHECKING:
    from hango.notebook import Course


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


@exercise("06.1", "Put memory before PromptCache and watch the ratio collapse",
          answer="default=, wrong=: what experiment(...) returned for each stack, memory edited before "
                 "every turn",
          hint="experiment(STACKS[name], turns=6, memory_before={t: MEMORY + f'- Today is turn {t}.\\n' "
               "for t in range(1, 7)}) for 'default' and 'memory-before-cache'")
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


@exercise("06.2", "Raise the minimum cacheable length",
          answer="runs={stack name: experiment(...)}, first_read={stack name: number of the first call "
                 "that reads}",
          hint="SimulatedModel(min_cacheable=2048, ...) in experiment; a breakpoint caches only once the "
               "prompt up to it reaches 2,048 tokens")
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


@exercise("06.3", "Wait exactly five minutes",
          answer="conversation=the conversation you continued, predicted=[two reasons: a string, or None "
                 "for a full read]",
          hint="conversation.clock[0] += 300, ask a turn, then += 299; an entry is alive while start < "
               "expires_at")
def _06_3(course: Course, conversation: Any = None,
          predicted: Sequence[str | None] | None = None) -> str:
    model, responses = _conversation(conversation, "conversation")
    starts = [t.started for t in model.traces[-3:]]
    if len(starts) < 3 or [b - a for a, b in pairwise(starts)] != [300, 299]:
        raise NotYet(f"the last three calls started at {starts}: wait 300 s, ask, wait 299 s, ask")
    actual = [r.diagnostics.miss_reason if r.diagnostics else None for r in responses[-2:]]
    if isinstance(predicted, str) or not isinstance(predicted, list | tuple) or len(predicted) != 2 \
            or list(predicted) != actual:
        raise NotYet(f"pass your two predictions of why not read as predicted=[...] (None for a "
                     f"full read); you predicted {predicted!r}")
    return (f"after 300 s: {actual[0]} (the 5-minute entry expired at the very second the call "
            f"started); after 299 s: {actual[1] or 'a full read'}")


@exercise("06.4", "Read the open refresh rule the other way",
          answer="conversation=the conversation you continued, predicted=[seconds left after turn 11, "
                 "after turn 12, tokens turn 13 reads]: three whole numbers",
          hint="SimulatedModel(refresh='all', ...) and course.agent(model, stack=..., "
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
    if not predicted or ints(predicted, "predicted", 3) != [*left, read]:
        raise NotYet(f"pass predicted=[seconds left after turn 11, after turn 12, tokens turn 13 "
                     f"reads]; you predicted {predicted}")
    return (f"each ordinary call refreshed the prefix entry to 300 s, and turn 13, 301 s later, "
            f"read {read} tokens")
