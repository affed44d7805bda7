"""The simulator against each documented caching rule: worked lookback examples, writes only at
breakpoints, minimums, TTL and refresh, 1-hour TTL pricing, the 4-breakpoint error, the multi-turn
shape, model scoping, diagnostics; `history=1` keeps the last call and changes no figure.

The simulator against the provider's documented caching rules (notes/prompt-caching.md §1).

Token arithmetic used throughout (see ``hango.models.simulated``): a system block of 400 ASCII
characters is 400/4 + 3 = 103 tokens; ``Message("user", "hi")`` is ceil(2/4) + 3 + 4 = 8 tokens.
So ten blocks are 1030 tokens, just above the default minimum of 1024.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.models.base import (
    Block,
    Breakpoint,
    CacheDiagnostics,
    InvalidRequest,
    Message,
    Request,
    Response,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from hango.models.simulated import (
    MIN_CACHEABLE,
    PRICES,
    CacheStore,
    Reply,
    SimulatedModel,
    cost,
    count_tokens,
    min_cacheable_tokens,
    positions,
    replay,
    tool_call,
)

SYS = 103  # tokens of one 400-character system block
HI = 8  # tokens of Message("user", "hi")


class Clock:
    """An injectable clock: tests move ``now`` by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def block(i: int, tag: str = "") -> Block:
    text = f"block {i:02d}{tag} ".ljust(400, "x")
    assert len(text) == 400
    return Block(text, source=f"test:{i}")


def request(
    n: int,
    system_bps: tuple[int, ...] = (),
    *,
    model: str = "hango-sim-1",
    tools: tuple[ToolSpec, ...] = (),
    messages: tuple[Message, ...] | None = None,
    extra: tuple[Breakpoint, ...] = (),
) -> Request:
    """``n`` system blocks, breakpoints on the given system indices, and a short user turn."""
    msgs = (Message("user", "hi"),) if messages is None else messages
    bps = tuple(Breakpoint("system", i) for i in system_bps) + extra
    return Request(model, tools, tuple(block(i) for i in range(n)), msgs, bps)


def usage3(u: Usage) -> tuple[int, int, int]:
    """(cache_read, cache_creation, input) for compact assertions."""
    return u.cache_read_input_tokens, u.cache_creation_input_tokens, u.input_tokens


# --- tokens and positions ---


def test_count_tokens_is_utf8_bytes_over_four_rounded_up() -> None:
    assert [count_tokens(s) for s in ["", "abcd", "abcde", "é", "ééé", "🙂", "x" * 400]] == [
        0,
        1,
        2,
        1,
        2,
        1,
        100,
    ]


def test_position_tokens_follow_the_documented_formula() -> None:
    # tool, as sent: '{"description":"Read a file.","input_schema":{"properties":{},
    # "type":"object"},"name":"read"}' = 94 chars -> 24 + 3
    req = request(1, tools=(ToolSpec("read", "Read a file."),))
    assert [p.tokens for p in positions(req)] == [27, SYS, HI]
    assert [p.tier for p in positions(req)] == ["tools", "system", "messages"]


def test_tool_use_and_tool_result_runs_are_one_position_each() -> None:
    calls = tuple(ToolCall(f"c{i}", "read_file", {"path": f"{i}.md"}) for i in range(3))
    results = tuple(ToolResult(f"c{i}", "ok") for i in range(3))
    msgs = (
        Message("user", "q"),
        Message("assistant", "looking", tool_calls=calls),
        Message("user", "and?", tool_results=results),
    )
    labels = [p.label for p in positions(request(1, messages=msgs))]
    assert labels == [
        "system[0]",
        "messages[0].text",
        "messages[1].text",
        "messages[1].tool_use×3",
        "messages[2].tool_result×3",
        "messages[2].text",
    ]


def test_collapsed_runs_keep_a_long_tool_turn_inside_the_lookback_window() -> None:
    """25 calls and 25 results are 2 positions, so the previous breakpoint is 3 back, not 51."""
    model = SimulatedModel(clock=Clock())
    first = request(10, messages=(Message("user", "hi"),), extra=(Breakpoint("messages", 0),))
    model.complete(first)  # writes at the user turn: 1030 + 8 = 1038
    calls = tuple(ToolCall(f"c{i}", "f") for i in range(25))
    results = tuple(ToolResult(f"c{i}", "ok") for i in range(25))
    msgs = (
        Message("user", "hi"),
        Message("assistant", tool_calls=calls),
        Message("user", tool_results=results),
    )
    second = request(10, messages=msgs, extra=(Breakpoint("messages", 2),))
    use = sum(p.tokens for p in positions(second)[-2:])
    # each call: '{"input":{},"name":"f"}' = 23 chars -> 6 + 3 = 9; x25, +4 for the message
    assert use == (25 * 9 + 4) + (25 * (1 + 3) + 4)
    assert usage3(model.complete(second).usage) == (1038, use, 0)


def test_a_messages_breakpoint_marks_the_last_block_of_its_message() -> None:
    results = (ToolResult("c1", "x" * 40),)
    msgs = (Message("user", "q" * 400, tool_results=results),)
    model = SimulatedModel(clock=Clock())
    u = model.complete(request(10, messages=msgs, extra=(Breakpoint("messages", 0),))).usage
    # result run 10 + 3 + 4 = 17, then the text 100 + 3 = 103: both are before the marker
    assert usage3(u) == (0, 1030 + 17 + 103, 0)


def test_message_boundaries_are_part_of_the_prompt() -> None:
    one = (Message("user", "a", tool_results=(ToolResult("c1", "r"),)),)
    two = (Message("user", tool_results=(ToolResult("c1", "r"),)), Message("user", "a"))
    model = SimulatedModel(clock=Clock(), min_cacheable=1)
    model.complete(request(1, messages=one, extra=(Breakpoint("messages", 0),)))
    r = model.complete(request(1, messages=two, extra=(Breakpoint("messages", 1),)))
    assert r.usage.cache_read_input_tokens == 0
    assert r.diagnostics == CacheDiagnostics("messages_changed", SYS + 8 + 4)  # result, text


def test_block_source_is_not_part_of_the_prompt() -> None:
    model = SimulatedModel(clock=Clock())
    model.complete(request(10, (9,)))
    renamed = dataclasses.replace(
        request(10, (9,)), system=tuple(Block(b.text, "elsewhere") for b in request(10).system)
    )
    assert model.complete(renamed).usage.cache_read_input_tokens == 1030


# --- the documented worked examples (§1.4) ---


def test_worked_example_turns_one_two_three() -> None:
    model = SimulatedModel(clock=Clock())
    turn1 = model.complete(request(10, (9,)))
    assert usage3(turn1.usage) == (0, 1030, HI)
    assert turn1.diagnostics == CacheDiagnostics("previous_message_not_found")

    turn2 = model.complete(request(15, (14,)))  # walks back from 15, hits the write at 10
    assert usage3(turn2.usage) == (1030, 5 * SYS, HI)
    assert turn2.diagnostics == CacheDiagnostics(None)  # it read all that turn 1 cached

    turn3 = model.complete(request(35, (34,)))  # checks 35..16: the entry at 15 is outside
    assert usage3(turn3.usage) == (0, 35 * SYS, HI)
    assert turn3.diagnostics == CacheDiagnostics("outside_lookback", 15 * SYS)


def test_a_second_breakpoint_at_fifteen_fixes_turn_three() -> None:
    model = SimulatedModel(clock=Clock())
    model.complete(request(10, (9,)))
    model.complete(request(15, (14,)))
    turn3 = model.complete(request(35, (14, 34)))
    assert usage3(turn3.usage) == (15 * SYS, 20 * SYS, HI)
    assert turn3.diagnostics == CacheDiagnostics(None)
    assert model.traces[-1].hits == (14,)  # the walk stops at its first hit (10 is not read)
    assert model.traces[-1].writes == (34,)


@pytest.mark.parametrize(("blocks", "read"), [(34, 15 * SYS), (35, 0)])
def test_lookback_counts_the_breakpoint_itself_as_the_first_of_twenty(blocks: int, read: int) -> None:
    model = SimulatedModel(clock=Clock())
    model.complete(request(15, (14,)))
    u = model.complete(request(blocks, (blocks - 1,))).usage
    assert usage3(u) == (read, blocks * SYS - read, HI)


def test_entries_are_written_only_at_breakpoints() -> None:
    """Reads look for prior *writes*, not stable content: block 10 was never a breakpoint."""
    model = SimulatedModel(clock=Clock())
    model.complete(request(12, (11,)))  # writes at 12 only
    edited = dataclasses.replace(
        request(11, (10,)),  # blocks 1-10 unchanged, a new 11th
        system=(*request(10).system, block(10, "changed")),
    )
    u = model.complete(edited).usage
    assert usage3(u) == (0, 11 * SYS, HI)
    assert model.traces[-1].hits == ()


def test_common_mistake_breakpoint_on_a_block_that_changes_every_call() -> None:
    def turn(second: int, bps: tuple[int, ...] = ()) -> Request:
        msg = Message("user", f"[2026-11-30T07:00:0{second}Z] What is in memory?")  # 41 chars
        return request(12, bps, messages=(msg,), extra=(Breakpoint("messages", 0),))

    stamped = 12 * SYS + 18  # the message: 11 + 3 + 4
    model = SimulatedModel(clock=Clock())
    for second in (1, 2, 3):
        r = model.complete(turn(second))
        assert usage3(r.usage) == (0, stamped, 0)  # a fresh write every time, never a read
    assert r.diagnostics == CacheDiagnostics("messages_changed", stamped)

    fixed = SimulatedModel(clock=Clock())
    fixed.complete(turn(1, (11,)))
    assert usage3(fixed.complete(turn(2, (11,))).usage) == (12 * SYS, 18, 0)


# --- minimum cacheable length ---


def test_a_prefix_below_the_minimum_caches_nothing() -> None:
    model = SimulatedModel(clock=Clock())
    for _ in range(2):  # nothing was written, so the second call cannot read either
        r = model.complete(request(3, (2,)))
        assert usage3(r.usage) == (0, 0, 3 * SYS + HI)
        assert r.diagnostics == CacheDiagnostics("below_minimum")


@pytest.mark.parametrize(("minimum", "written"), [(3 * SYS, 3 * SYS), (3 * SYS + 1, 0)])
def test_the_minimum_is_on_the_cumulative_prefix_and_inclusive(minimum: int, written: int) -> None:
    model = SimulatedModel(clock=Clock(), min_cacheable=minimum)
    assert model.complete(request(3, (2,))).usage.cache_creation_input_tokens == written
    assert model.complete(request(3, (2,))).usage.cache_read_input_tokens == written


NOTES_MINIMUMS = {  # notes/prompt-caching.md §1.5, the newest doc's list
    512: ["claude-fable-5-1", "claude-mythos-5-1", "claude-opus-5", "claude-fable-5", "claude-mythos-5"],
    1024: ["claude-opus-4-8", "claude-sonnet-5", "claude-sonnet-4-6", "claude-sonnet-4-5",
           "claude-opus-4-1", "claude-opus-4", "claude-sonnet-4"],
    2048: ["claude-mythos-preview", "claude-opus-4-7", "claude-3-5-haiku"],
    4096: ["claude-opus-4-6", "claude-opus-4-5", "claude-haiku-4-5"],
}


def test_minimums_come_from_the_data_table() -> None:
    table = {name: row.tokens for name, row in MIN_CACHEABLE.items() if name != "hango-sim-1"}
    assert table == {name: tokens for tokens, names in NOTES_MINIMUMS.items() for name in names}
    assert min_cacheable_tokens("hango-sim-1") == 1024
    assert min_cacheable_tokens("claude-haiku-4-5-20251001") == 4096  # dated id: prefix match
    assert min_cacheable_tokens("claude-opus-4-5-20251101") == 4096  # longest prefix wins
    assert min_cacheable_tokens("claude-opus-4-20250514") == 1024
    assert min_cacheable_tokens("claude-fable-5-1-20261001") == 512
    assert all(row.source and row.checked for row in MIN_CACHEABLE.values())
    assert all(row.source and row.checked for row in PRICES.values())
    haiku = SimulatedModel("claude-haiku-4-5", clock=Clock())
    r = haiku.complete(request(10, (9,), model="claude-haiku-4-5"))
    assert usage3(r.usage) == (0, 0, 1030 + HI)  # 1030 < 4096


def test_an_unknown_model_gets_the_strictest_minimum_and_a_warning_naming_it() -> None:
    with pytest.warns(UserWarning, match="'some-new-model'.*4096"):
        assert min_cacheable_tokens("some-new-model") == 4096
    for newer in ("claude-opus-5-5", "claude-sonnet-5-5", "claude-fable-5-2"):  # not Opus 5's...
        with pytest.warns(UserWarning, match=f"'{newer}'.*4096"):
            assert min_cacheable_tokens(newer) == 4096
    with pytest.warns(UserWarning, match="'claude-sonnet-9'"):
        r = SimulatedModel("claude-sonnet-9", clock=Clock()).complete(request(10, (9,), model=""))
    assert r.diagnostics == CacheDiagnostics("below_minimum")  # 1030 < 4096


# --- lifetime ---


@pytest.mark.parametrize(("later", "read"), [(299.5, 1030), (300.5, 0)])
def test_entries_expire_five_minutes_after_the_request_started(later: float, read: int) -> None:
    clock = Clock()
    model = SimulatedModel(clock=clock)
    model.complete(request(10, (9,)))
    clock.now = later
    r = model.complete(request(10, (9,)))
    assert usage3(r.usage) == (read, 1030 - read, HI)
    assert r.diagnostics == (CacheDiagnostics(None) if read else CacheDiagnostics("expired", 1030))


def test_a_hit_refreshes_the_lifetime() -> None:
    clock = Clock()
    model = SimulatedModel(clock=clock)
    model.complete(request(10, (9,)))
    clock.now = 4 * 60
    assert model.complete(request(10, (9,))).usage.cache_read_input_tokens == 1030
    clock.now = 8 * 60  # 8 min after the write, 4 after the refresh
    assert model.complete(request(10, (9,))).usage.cache_read_input_tokens == 1030

    unrefreshed = SimulatedModel(clock=Clock())
    unrefreshed.complete(request(10, (9,)))
    unrefreshed.clock = lambda: 8 * 60.0
    assert unrefreshed.complete(request(10, (9,))).usage.cache_read_input_tokens == 0


def test_one_hour_ttl() -> None:
    clock = Clock()
    model = SimulatedModel(clock=clock)
    hour = request(10, extra=(Breakpoint("system", 9, ttl="1h"),))
    first = model.complete(hour)
    assert first.usage.cache_creation_1h_input_tokens == 1030
    clock.now = 30 * 60
    assert model.complete(hour).usage.cache_read_input_tokens == 1030
    clock.now = 30 * 60 + 3600.5
    assert model.complete(hour).usage.cache_read_input_tokens == 0


def test_mixed_ttls_split_the_write_and_the_cost() -> None:
    model = SimulatedModel(clock=Clock())
    mixed = request(20, extra=(Breakpoint("system", 9, ttl="1h"), Breakpoint("system", 19)))
    u = model.complete(mixed).usage
    assert (u.cache_creation_input_tokens, u.cache_creation_1h_input_tokens) == (2060, 1030)
    # $3/M: 8 uncached + 1030 at 1.25 (5m) + 1030 at 2 (1h), and output at $15/M
    expected = (3 * (8 + 1030 * 1.25 + 1030 * 2) + 15 * u.output_tokens) / 1e6
    assert cost(u, "hango-sim-1") == pytest.approx(expected, rel=1e-12)


def test_a_one_hour_breakpoint_below_the_minimum_writes_nothing_at_one_hour() -> None:
    model = SimulatedModel(clock=Clock())
    u = model.complete(request(10, extra=(Breakpoint("system", 4, ttl="1h"), Breakpoint("system", 9)))).usage
    assert (u.cache_creation_input_tokens, u.cache_creation_1h_input_tokens) == (1030, 0)


def test_a_one_hour_breakpoint_after_a_five_minute_one_is_rejected() -> None:
    bad = request(10, extra=(Breakpoint("system", 4), Breakpoint("system", 9, ttl="1h")))
    with pytest.raises(InvalidRequest) as err:  # the provider's 400, word for word
        SimulatedModel(clock=Clock()).complete(bad)
    assert str(err.value) == (
        "system.9.cache_control.ttl: a ttl='1h' cache_control block must not come after a "
        "ttl='5m' cache_control block. Note that blocks are processed in the following order: "
        "`tools`, `system`, `messages`.")


# --- the open refresh rule: a switch, and replay at another pace ---


def conversation(turns: int, *, first: str = "hi") -> Request:
    """Ten system blocks (system breakpoint on the last) and a conversation breakpoint."""
    msgs = [Message("user", first)]
    for t in range(1, turns):
        msgs += [Message("assistant", f"answer {t}"), Message("user", f"question {t}")]
    return request(10, (9,), messages=tuple(msgs), extra=(Breakpoint("messages", len(msgs) - 1),))


@pytest.mark.parametrize(("refresh", "read"), [("all", 1030), ("longest", 0)])
def test_the_refresh_rule_decides_whether_the_prefix_outlives_a_conversation(
        refresh: str, read: int) -> None:
    """Call 2 reads from the conversation entry. Does that refresh the prefix entry too?

    ``all``: yes, so at t=400 (a changed conversation) the prefix is still read. ``longest``:
    no, the prefix entry was written at t=0 and expired at t=300."""
    clock = Clock()
    model = SimulatedModel(clock=clock, refresh=refresh)  # type: ignore[arg-type]
    model.complete(conversation(1))
    clock.now = 200
    assert model.complete(conversation(2)).usage.cache_read_input_tokens > 1030
    clock.now = 400
    r = model.complete(conversation(2, first="edited"))  # the history changed: conv entry misses
    assert r.usage.cache_read_input_tokens == read


def test_a_one_hour_prefix_survives_under_either_reading() -> None:
    for refresh in ("all", "longest"):
        clock = Clock()
        model = SimulatedModel(clock=clock, refresh=refresh)  # type: ignore[arg-type]
        hour = dataclasses.replace(conversation(1), breakpoints=(
            Breakpoint("system", 9, "1h"), Breakpoint("messages", 0)))
        model.complete(hour)
        clock.now = 1800
        edited = dataclasses.replace(hour, messages=(Message("user", "edited"),))
        assert model.complete(edited).usage.cache_read_input_tokens == 1030


def test_the_refresh_switch_is_checked() -> None:
    with pytest.raises(ValueError, match="refresh must be 'all' or 'longest', not 'some'"):
        SimulatedModel(refresh="some")  # type: ignore[arg-type]
    assert SimulatedModel().refresh == "longest"  # the documented default


def test_replay_prices_recorded_calls_at_a_new_pace() -> None:
    clock = Clock()
    model = SimulatedModel(clock=clock)
    recorded = []
    for t, req in enumerate([conversation(1), conversation(2), conversation(2, first="e")]):
        clock.now = 200.0 * t
        recorded.append((clock.now, req, model.complete(req)))
    same = replay(recorded)
    assert [r.usage for r in same] == [r.usage for _, _, r in recorded]
    assert [r.text for r in same] == [r.text for _, _, r in recorded]
    fast = replay([(10.0 * t, req, r) for t, (_, req, r) in enumerate(recorded)])
    assert fast[2].usage.cache_read_input_tokens == 1030 > same[2].usage.cache_read_input_tokens
    with pytest.raises(ValueError, match="backwards"):
        replay(list(reversed(recorded)))


# --- usage and limits ---


def test_input_tokens_are_only_the_uncached_tail() -> None:
    tail = Message("user", "q" * 4000)  # 1000 + 3 + 4
    model = SimulatedModel(clock=Clock())
    u = model.complete(request(10, (9,), messages=(tail,))).usage
    assert usage3(u) == (0, 1030, 1007)
    u = model.complete(request(10, (9,), messages=(tail,))).usage
    assert usage3(u) == (1030, 0, 1007)
    assert u.total_input_tokens == 2037 == sum(p.tokens for p in positions(request(10, messages=(tail,))))


def test_more_than_four_breakpoints_is_the_providers_error() -> None:
    model = SimulatedModel(clock=Clock())
    model.complete(request(10, (1, 3, 5, 9)))
    model.complete(request(10, (1, 3, 5, 9), extra=(Breakpoint("system", 9),)))  # same block
    with pytest.raises(ValueError) as err:
        model.complete(request(10, (1, 3, 5, 7, 9)))
    assert str(err.value) == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    assert len(model.calls) == 2


def test_a_breakpoint_outside_the_request_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        SimulatedModel(clock=Clock()).complete(request(2, extra=(Breakpoint("messages", 1),)))


def test_multi_turn_conversation_reads_the_history_and_writes_the_new_turns() -> None:
    """The runtime's pattern: a breakpoint on the last message of a growing conversation."""
    model = SimulatedModel(clock=Clock())
    history: list[Message] = []
    reads = []
    for i in range(3):
        history.append(Message("user", f"question {i} " + "q" * 388))  # 400 chars: 100 + 7
        req = request(10, (9,), messages=tuple(history), extra=(Breakpoint("messages", len(history) - 1),))
        r = model.complete(req)
        history.append(Message("assistant", r.text))
        reads.append(usage3(r.usage))
        assert r.usage.input_tokens == 0
    assert history[1].text == "(hango-sim) You said: question 0 " + "q" * 68 + "…"
    reply = 33  # 22 + 11 + 68 + 3 bytes ("…" is 3) = 104 -> 26, + 3 + 4
    assert reads[0] == (0, 1030 + 107, 0)
    assert reads[1] == (1030 + 107, reply + 107, 0)  # read up to turn 1, write reply + turn 2
    assert reads[2] == (1030 + 107 + reply + 107, reply + 107, 0)


# --- scope and diagnostics ---


def test_caches_are_scoped_to_the_model() -> None:
    store = CacheStore()
    sim1 = SimulatedModel("hango-sim-1", clock=Clock(), store=store)
    sim2 = SimulatedModel("hango-sim-2", clock=Clock(), store=store, min_cacheable=1024)
    assert sim1.complete(request(10, (9,), model="hango-sim-1")).usage.cache_read_input_tokens == 0
    assert sim2.complete(request(10, (9,), model="hango-sim-2")).usage.cache_read_input_tokens == 0
    again = SimulatedModel("hango-sim-1", clock=Clock(), store=store)  # same name, same store
    assert again.complete(request(10, (9,), model="")).usage.cache_read_input_tokens == 1030
    assert set(store.entries) == {"hango-sim-1", "hango-sim-2"}


def test_switching_the_model_in_the_request_is_model_changed() -> None:
    model = SimulatedModel(clock=Clock())
    model.complete(request(10, (9,)))
    r = model.complete(request(10, (9,), model="claude-sonnet-4-5"))
    assert r.model == "claude-sonnet-4-5"
    assert usage3(r.usage) == (0, 1030, HI)
    assert r.diagnostics == CacheDiagnostics("model_changed", 1030)


TOOLS = (ToolSpec("read", "Read a file."), ToolSpec("write", "Write a file."))
CONVO = (Message("user", "hi"), Message("assistant", "hello"), Message("user", "more"))


def base_request(**change: object) -> Request:
    req = request(10, (9,), tools=TOOLS, messages=CONVO, extra=(Breakpoint("messages", 2),))
    return dataclasses.replace(req, **change)  # type: ignore[arg-type]


BASE_POS = positions(base_request())
THROUGH_SYSTEM = sum(p.tokens for p in BASE_POS[:12])
CACHED = sum(p.tokens for p in BASE_POS)


@pytest.mark.parametrize(
    ("change", "reason", "read"),
    [
        ({}, None, CACHED),
        ({"tools": (ToolSpec("read", "Read any file."), TOOLS[1])}, "tools_changed", 0),
        ({"tools": (*TOOLS, ToolSpec("ls", "List."))}, "tools_changed", 0),
        ({"tools": TOOLS[::-1]}, "tools_changed", 0),
        ({"system": (block(0, "edited"), *request(10).system[1:])}, "system_changed", 0),
        ({"messages": (Message("user", "hey"), *CONVO[1:])}, "messages_changed", THROUGH_SYSTEM),
        ({"messages": (*CONVO[:2], Message("user", "less"))}, "messages_changed", THROUGH_SYSTEM),
    ],
)
def test_diagnostics_name_the_first_changed_tier(
    change: dict[str, object], reason: str | None, read: int
) -> None:
    model = SimulatedModel(clock=Clock())
    model.complete(base_request())
    r = model.complete(base_request(**change))
    assert r.usage.cache_read_input_tokens == read
    assert r.diagnostics == CacheDiagnostics(reason, CACHED - read if reason else 0)


def test_appending_turns_is_not_a_miss() -> None:
    model = SimulatedModel(clock=Clock())
    model.complete(base_request())
    longer = (*CONVO, Message("assistant", "ok"), Message("user", "go on"))
    r = model.complete(
        base_request(messages=longer, breakpoints=(Breakpoint("system", 9), Breakpoint("messages", 4)))
    )
    assert r.usage.cache_read_input_tokens == CACHED
    assert r.diagnostics == CacheDiagnostics(None)


def test_no_breakpoint_means_no_diagnostics_and_no_caching() -> None:
    r = SimulatedModel(clock=Clock()).complete(request(10))
    assert r.diagnostics is None
    assert usage3(r.usage) == (0, 0, 1030 + HI)


# --- replies ---


def test_script_replies_in_order_with_deterministic_call_ids() -> None:
    model = SimulatedModel(
        clock=Clock(),
        policy=[
            "hello",
            [tool_call("read_file", {"path": "a.md"}), tool_call("ls")],
            Reply("both", (ToolCall("mine", "ls"),)),
            lambda req: f"I see {len(req.system)} system blocks",
            [tool_call("ls")],
        ],
    )
    r = [model.complete(request(2)) for _ in range(5)]
    assert (r[0].text, r[0].tool_calls, r[0].stop_reason) == ("hello", (), "end_turn")
    assert r[0].usage.output_tokens == 2
    assert r[1].tool_calls == (ToolCall("call_1", "read_file", {"path": "a.md"}), ToolCall("call_2", "ls"))
    assert r[1].stop_reason == "tool_use"
    # '{"input":{"path":"a.md"},"name":"read_file"}' = 44 -> 11; '{"input":{},"name":"ls"}' -> 6
    assert r[1].usage.output_tokens == 17
    assert (r[2].text, r[2].tool_calls) == ("both", (ToolCall("mine", "ls"),))
    assert r[3].text == "I see 2 system blocks"
    assert r[4].tool_calls == (ToolCall("call_3", "ls"),)
    with pytest.raises(RuntimeError, match="no reply left"):
        model.complete(request(2))
    assert [resp for _, resp in model.calls] == r


def test_default_policy_is_deterministic_text() -> None:
    convo = (
        Message("user", "q"),
        Message("assistant", tool_calls=(ToolCall("c1", "ls"),)),
        Message("user", tool_results=(ToolResult("c1", "a.md b.md"),)),
    )
    answers = []
    for _ in range(2):
        model = SimulatedModel(clock=Clock())
        answers.append(
            (
                model.complete(request(1, messages=(Message("user", "Hi there"),))),
                model.complete(request(1, messages=convo)),
            )
        )
    assert answers[0] == answers[1]
    first, after_tools = answers[0]
    assert first.text == "(hango-sim) You said: Hi there"
    assert after_tools.text == "(hango-sim) Read 1 tool result(s). c1: a.md b.md"
    assert first.tool_calls == after_tools.tool_calls == ()


def test_calls_record_every_request_and_response() -> None:
    model = SimulatedModel(clock=Clock())
    reqs = [request(10, (9,)), request(11, (10,))]
    resps = [model.complete(req) for req in reqs]
    assert model.calls == list(zip(reqs, resps, strict=True))
    assert [t.hits for t in model.traces] == [(), (9,)]


def test_history_keeps_the_last_calls_and_changes_no_figure() -> None:
    """``history=1`` (a server's model): only the last call is kept, the cache and the
    diagnostics are what they are with every call kept, and a script still counts its calls."""
    reqs = [request(10, (9,)), request(11, (10,)), request(10, (9,), model="claude-sonnet-4-5")]
    everything, last = SimulatedModel(clock=Clock()), SimulatedModel(clock=Clock(), history=1)
    for req in reqs:
        assert last.complete(req) == everything.complete(req)
        assert last.calls == everything.calls[-1:] and last.traces == everything.traces[-1:]
    assert last.calls[0][1].diagnostics == CacheDiagnostics("model_changed", 1133)
    scripted = SimulatedModel(clock=Clock(), policy=["one", "two"], history=1)
    scripted.complete(request(2))
    scripted.complete(request(2))
    with pytest.raises(RuntimeError, match="no reply left for call 3"):
        scripted.complete(request(2))
    with pytest.raises(ValueError, match="history must be at least 1"):
        SimulatedModel(history=0)


def test_max_tokens_zero_prewarms_without_using_the_script() -> None:
    model = SimulatedModel(clock=Clock(), policy=["answer"])
    warm = model.complete(dataclasses.replace(request(10, (9,)), max_tokens=0))
    assert (warm.text, warm.stop_reason, warm.usage.output_tokens) == ("", "max_tokens", 0)
    assert warm.usage.cache_creation_input_tokens == 1030
    real = model.complete(request(10, (9,)))
    assert (real.text, real.usage.cache_read_input_tokens) == ("answer", 1030)


def test_cost_uses_the_multipliers() -> None:
    u = Usage(
        input_tokens=1000,
        cache_creation_input_tokens=2000,
        cache_read_input_tokens=10000,
        output_tokens=500,
        cache_creation_1h_input_tokens=1000,
    )
    # 3 * (1000 + 1000*1.25 + 1000*2 + 10000*0.1) / 1e6 + 15 * 500 / 1e6
    assert cost(u, "claude-sonnet-4-6") == pytest.approx(0.02325, rel=1e-12)
    # break-even at two calls for the 5-minute TTL: 1.25 + 0.1 < 2
    cached = cost(Usage(0, 10_000), "hango-sim-1") + cost(Usage(0, 0, 10_000), "hango-sim-1")
    assert cached < 2 * cost(Usage(10_000), "hango-sim-1")


def test_a_model_with_no_price_row_is_priced_as_sonnet_4_6_and_says_so() -> None:
    u = Usage(input_tokens=1000, output_tokens=100)
    with pytest.warns(UserWarning, match=r"no price is known for model 'claude-opus-5-5'; priced "
                                         r"as Sonnet 4\.6 \(\$3 in, \$15 out per million"):
        assert cost(u, "claude-opus-5-5") == cost(u, "hango-sim-1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a model with its own row is priced without a word
        cost(u, "claude-sonnet-4-6-20260217")


# --- a property over random call sequences ---


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(0, 29), st.integers(0, 400)), min_size=1, max_size=6)
)
def test_usage_always_adds_up(calls: list[tuple[int, int, int]]) -> None:
    clock = Clock()
    model = SimulatedModel(clock=clock)
    for n, bp, dt in calls:
        clock.now += dt
        req = request(n, (min(bp, n - 1),))
        u = model.complete(req).usage
        total = sum(p.tokens for p in positions(req))
        assert u.total_input_tokens == total
        assert min(usage3(u)) >= 0
        assert (
            u.input_tokens == total - (min(bp, n - 1) + 1) * SYS
            or u.cache_creation_input_tokens == u.cache_read_input_tokens == 0
        )


def test_one_model_serves_many_threads_and_a_slow_policy_holds_none_of_them() -> None:
    """The server shares one model among its run threads: a policy that takes its time (here it
    waits on an event) holds up no other call, and calls from many threads at once are each
    priced once, none lost."""
    import threading

    release = threading.Event()

    def policy(req: Request) -> str:
        if req.messages[-1].text == "hold":
            assert release.wait(30)
        return "ok"

    def ask(text: str) -> Request:
        return request(2, (1,), messages=(Message("user", text),))

    model = SimulatedModel(policy=policy)
    held = threading.Thread(target=model.complete, args=(ask("hold"),))
    held.start()
    answers: list[Response] = []
    workers = [threading.Thread(target=lambda t=f"q{i}": answers.append(model.complete(ask(t))))
               for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert len(answers) == 8 and held.is_alive()  # the others answered; the held call waits
    release.set()
    held.join(30)
    assert len(model.calls) == 9 and len({r.id for _, r in model.calls}) == 9
