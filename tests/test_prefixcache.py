"""The simulator's automatic prefix regime against the documented rules (hango.models.prefixcache).

The differential test prices random request sequences twice: with ``SimulatedModel(caching=
"automatic")`` (hashed prefix entries, eviction while it goes) and with a small model written
again here from the rules alone (compare each prompt with every earlier one, no store): the
cached tokens must agree on every call.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.models.base import Block, Breakpoint, Message, Request, ToolSpec, Usage
from hango.models.chat import chat_request
from hango.models.prefixcache import (
    LLAMA_CPP,
    OPENAI,
    VLLM,
    PrefixCache,
    PrefixRules,
    Token,
    rendered_tokens,
)
from hango.models.simulated import SimulatedModel, replay


def tokens(*parts: tuple[str, int]) -> list[Token]:
    """A prompt of distinct tokens: ``("a", 1024)`` is a0 … a1023."""
    return [f"{name}{i}" for name, n in parts for i in range(n)]


def cached(rules: PrefixRules, calls: Sequence[tuple[float, list[Token]]]) -> list[int]:
    cache = PrefixCache(rules)
    return [cache.price("m", now, prompt)[1] for now, prompt in calls]


def test_openai_caches_from_1024_tokens_in_steps_of_128() -> None:
    a = tokens(("a", 2006))
    assert cached(OPENAI, [(0, a), (1, a)]) == [0, 1920]  # the guide's own example: 2006 -> 1920
    short = tokens(("s", 1023))
    assert cached(OPENAI, [(0, short), (1, short)]) == [0, 0]  # under 1,024: never cached
    b = a[:1300] + tokens(("b", 700))
    assert cached(OPENAI, [(0, a), (1, b)]) == [0, 1280]  # common 1,300 -> the cut below it


def test_a_block_size_or_exact_reuse_the_common_prefix_cut_there() -> None:
    a, b = tokens(("a", 100)), tokens(("a", 37), ("b", 10))
    assert cached(VLLM, [(0, a), (1, b)]) == [0, 32]  # 16-token blocks: 37 -> 32
    assert cached(LLAMA_CPP, [(0, a), (1, b)]) == [0, 37]


def test_a_change_at_token_n_loses_everything_after_n() -> None:
    a = tokens(("a", 3000))
    edited = [*a[:2000], "edit", *a[2001:]]
    assert cached(LLAMA_CPP, [(0, a), (1, edited)]) == [0, 2000]
    assert cached(OPENAI, [(0, a), (1, edited)]) == [0, 1920]


def test_idle_eviction_counts_from_the_last_use() -> None:
    a = tokens(("a", 2000))
    assert cached(OPENAI, [(0, a), (299, a), (598, a)]) == [0, 1920, 1920]  # each use renews it
    assert cached(OPENAI, [(0, a), (300, a)]) == [0, 0]  # alive while now < last use + 300
    assert cached(VLLM, [(0, a), (10**6, a)]) == [0, 2000]  # vLLM: no idle eviction


def test_capacity_evicts_the_least_recently_used_longest_prefix_first() -> None:
    rules = PrefixRules("exact", idle_seconds=None, capacity_tokens=150)
    a, b = tokens(("a", 100)), tokens(("b", 100))
    assert cached(rules, [(0, a), (1, b), (2, a)]) == [0, 0, 50]  # b pushed a's tail out
    shared = PrefixRules("exact", idle_seconds=None, capacity_tokens=100)
    c = tokens(("a", 60), ("c", 40))
    assert cached(shared, [(0, a), (1, c), (2, a)]) == [0, 60, 60]  # the shared head is kept


def test_usage_is_in_the_openai_convention_and_writes_are_free_unless_paid() -> None:
    a = tokens(("a", 2006))
    free, paid = PrefixCache(OPENAI), PrefixCache(PrefixRules(paid_writes=True))
    assert [free.price("m", t, a)[0] for t in (0, 1)] == [Usage(2006, 0, 0), Usage(86, 0, 1920)]
    assert [paid.price("m", t, a)[0] for t in (0, 1)] == [Usage(86, 1920, 0), Usage(86, 0, 1920)]
    assert Usage(86, 0, 1920).total_input_tokens == 2006  # prompt_tokens, the cached part inside


def test_entries_are_scoped_by_model() -> None:
    cache, a = PrefixCache(LLAMA_CPP), tokens(("a", 50))
    cache.price("m1", 0, a)
    assert cache.price("m2", 1, a)[1] == 0


@pytest.mark.parametrize("bad", [
    {"granularity": 0}, {"granularity": "weekly"}, {"idle_seconds": 0}, {"capacity_tokens": 0}])
def test_rules_refuse_what_cannot_be_a_cache(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        PrefixRules(**bad)  # type: ignore[arg-type]


def test_simulated_model_refuses_an_unknown_regime() -> None:
    with pytest.raises(ValueError, match="caching must be 'explicit' or 'automatic'"):
        SimulatedModel(caching="implicit")  # type: ignore[arg-type]


# --- the lesson's two columns: the same requests under both regimes ---------------------------

BASE = "Answer precisely and cite the file you read. " * 120  # ~1,350 tokens
TOOLS = (ToolSpec("ls", "List files."), ToolSpec("read_file", "Read a file."))


def request(memory: str, turns: int, memory_first: bool = False) -> Request:
    messages: list[Message] = []
    for t in range(turns):
        messages += [Message("user", f"question {t}"), Message("assistant", f"answer {t}")]
    messages.append(Message("user", f"question {turns}"))
    system = (Block(BASE, "system_prompt"), Block("Skills: none.", "skills"),
              Block(memory, "/memories/AGENTS.md"))
    at = 2 if memory_first else 1
    return Request("hango-sim-1", TOOLS, system, tuple(messages), (Breakpoint("system", at),))


def test_the_same_requests_under_both_regimes() -> None:
    """A memory edit before the third call. Memory after the breakpoint: both regimes read the
    tools, base prompt and skills index after the edit. Memory before it: the explicit regime
    reads nothing (no entry was ever written short of memory); the automatic one still reads
    the system text up to the edit, but loses the tools, which the template renders after it."""
    memory = [f"- fact {i}\n" * 30 for i in range(3)]
    reads = {}
    for memory_first in (False, True):
        calls = [(30.0 * i, request(memory[1 if i >= 2 else 0], i, memory_first))
                 for i in range(4)]
        recorded = [(t, r, SimulatedModel(policy=["x"]).complete(r)) for t, r in calls]
        reads[memory_first] = (
            [r.usage.cache_read_input_tokens or 0 for r in replay(recorded)],
            [r.usage.cache_read_input_tokens or 0 for r in replay(recorded, caching="automatic")])
        assert all(all(column[i] for i in (1, 3)) for column in reads[memory_first])
    (explicit, automatic), (explicit_wrong, automatic_wrong) = reads[False], reads[True]
    assert explicit[2] > 1024 and automatic[2] >= 1024
    assert explicit_wrong[2] == 0
    bare = request("", 0)
    tools = len(rendered_tokens(chat_request(bare))) - len(rendered_tokens(chat_request(
        Request(bare.model, (), bare.system, bare.messages, bare.breakpoints))))
    assert 0 < automatic_wrong[2] <= automatic[2] - tools


# --- the differential test ---------------------------------------------------------------------


def independent(granularity: str | int, idle: float | None,
                calls: Sequence[tuple[float, list[Token]]]) -> list[int]:
    """The rules alone: a prefix of a cut length is cached if an earlier prompt had it, and the
    last such prompt came less than ``idle`` seconds ago; the longest such cut is read."""
    out = []
    for i, (now, prompt) in enumerate(calls):
        if granularity == "openai":
            cuts = [c for c in range(1024, len(prompt) + 1) if (c - 1024) % 128 == 0]
        else:
            step = 1 if granularity == "exact" else int(granularity)
            cuts = [c for c in range(1, len(prompt) + 1) if c % step == 0]
        best = 0
        for cut in cuts:
            uses = [t for t, earlier in calls[:i]
                    if len(earlier) >= cut and earlier[:cut] == prompt[:cut]]
            if uses and (idle is None or now < max(uses) + idle):
                best = cut
        out.append(best)
    return out


memories = st.sampled_from(["- tea\n" * 40, "- coffee\n" * 40, "- tea\n" * 41, ""])
bases = st.sampled_from([BASE, BASE + "Be brief.", BASE[:3000]])
steps = st.lists(st.tuples(st.sampled_from([0.0, 60.0, 299.0, 300.0, 900.0]), bases, memories,
                           st.integers(0, 3), st.booleans()), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(granularity=st.sampled_from(["openai", "exact", 16, 256]),
       idle=st.sampled_from([None, 300.0]), steps=steps)
def test_the_regime_agrees_with_an_independent_model_of_the_rules(
        granularity: str | int, idle: float | None,
        steps: list[tuple[float, str, str, int, bool]]) -> None:
    clock = [0.0]
    sim = SimulatedModel(caching="automatic", clock=lambda: clock[0],
                         rules=PrefixRules(granularity, idle_seconds=idle))  # type: ignore[arg-type]
    calls, reads = [], []
    for gap, base, memory, turns, memory_first in steps:
        clock[0] += gap
        req = request(memory, turns, memory_first)
        req = Request(req.model, req.tools, (Block(base), *req.system[1:]), req.messages,
                      req.breakpoints)
        reads.append(sim.complete(req).usage.cache_read_input_tokens)
        calls.append((clock[0], rendered_tokens(chat_request(req, "hango-sim-1"))))
    assert reads == independent(granularity, idle, calls)
    assert [t.tokens for t in sim.prefix_traces] == [len(p) for _, p in calls]
