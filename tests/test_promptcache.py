"""PromptCache: the prefix TTL, and a valid request whatever the caller marked."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hango.agent.promptcache import PromptCache, normalize
from hango.agent.runtime import Agent, default_stack
from hango.agent.stack import DefaultStack
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.models.base import Block, Breakpoint, Message, Request, Response, ToolSpec, wire_request
from hango.models.simulated import SimulatedModel, cost
from hango.settings import load_settings

TOOLS = (ToolSpec("ls", "List."), ToolSpec("read_file", "Read."))
SYSTEM = (Block("base " * 300), Block("skills " * 100), Block("memory " * 50))
MESSAGES = (Message("user", "q1"), Message("assistant", "a1"), Message("user", "q2"))


def sent(cache: PromptCache, *marks: Breakpoint) -> Request:
    """What PromptCache passes on, given the stack's system breakpoint (on the skills index)."""
    seen: list[Request] = []

    def call_next(request: Request) -> Response:
        seen.append(request)
        return Response("ok")

    request = Request("hango-sim-1", TOOLS, SYSTEM, MESSAGES,
                      (Breakpoint("system", 1), *marks))
    cache.wrap_model_call(None, request, call_next)  # type: ignore[arg-type]
    return seen[0]


def test_the_prefix_is_cached_for_an_hour_by_default_and_the_conversation_for_five_minutes() -> None:
    assert sent(PromptCache()).breakpoints == (Breakpoint("system", 1, "1h"), Breakpoint("messages", 2))
    assert sent(PromptCache(prefix_ttl="5m")).breakpoints == (
        Breakpoint("system", 1), Breakpoint("messages", 2))
    with pytest.raises(ValueError, match="prefix_ttl must be '5m' or '1h', not '2h'"):
        PromptCache(prefix_ttl="2h")  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix_ttl", ["5m", "1h"])
def test_a_caller_marking_the_last_message_1h_gets_one_marker_and_a_valid_order(prefix_ttl: Any) -> None:
    """The issue's case: PromptCache's 5m on a block the caller marked 1h, and 1h after 5m."""
    out = sent(PromptCache(prefix_ttl=prefix_ttl), Breakpoint("messages", 2, "1h"))
    assert out.breakpoints == (Breakpoint("system", 1, "1h"), Breakpoint("messages", 2, "1h"))
    body = wire_request(out)  # the provider would accept it (no InvalidRequest)
    assert body["messages"][2]["content"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_the_lift_to_one_hour_costs_nothing_by_the_billing_rule() -> None:
    """Everything up to the last 1h breakpoint is written at the 1h rate (B - A) anyway."""
    lifted = sent(PromptCache(prefix_ttl="5m"), Breakpoint("messages", 2, "1h"))
    only_last = Request(lifted.model, lifted.tools, lifted.system, lifted.messages,
                        (Breakpoint("messages", 2, "1h"),))
    a, b = (SimulatedModel().complete(r).usage for r in (lifted, only_last))
    assert a == b and cost(a, "hango-sim-1") == cost(b, "hango-sim-1")


breakpoint_lists = st.lists(st.one_of(
    st.builds(Breakpoint, st.just("tools"), st.integers(0, 1), st.sampled_from(["5m", "1h"])),
    st.builds(Breakpoint, st.just("system"), st.integers(0, 2), st.sampled_from(["5m", "1h"])),
    st.builds(Breakpoint, st.just("messages"), st.integers(0, 2), st.sampled_from(["5m", "1h"]))),
    max_size=3)


@given(marks=breakpoint_lists, prefix_ttl=st.sampled_from(["5m", "1h"]))
def test_whatever_the_caller_marked_the_request_is_one_the_provider_accepts(
        marks: list[Breakpoint], prefix_ttl: Any) -> None:
    out = sent(PromptCache(prefix_ttl=prefix_ttl), *marks).breakpoints
    blocks = [(b.tier, b.index) for b in out]
    assert len(blocks) == len(set(blocks))  # never two markers on one block
    ttls = [b.ttl for b in out]
    assert ttls == sorted(ttls)  # every "1h" before every "5m"
    assert Breakpoint("system", 1, "1h") in out or (prefix_ttl == "5m" and "5m" in ttls)
    if len(out) <= 4:
        wire_request(Request("m", TOOLS, SYSTEM, MESSAGES, out))  # no InvalidRequest
    assert normalize(out) == out  # stable


def test_the_setting_reaches_the_default_stack(db: Database) -> None:
    for value in ("5m", "1h"):
        agent = Agent(db, "t", "a", SimulatedModel(), settings=load_settings(cache_prefix_ttl=value))
        stack = default_stack(agent)
        assert isinstance(stack, DefaultStack)
        assert stack.slots["prompt_cache"].prefix_ttl == value


# --- one cache per tenant -----------------------------------------------------------------------


def test_a_marker_on_a_tool_moves_onto_the_first_system_block() -> None:
    """The tools come before the tenant's scope on the wire: a prefix ending on one is shared."""
    out = sent(PromptCache(), Breakpoint("tools", 1, "1h"))
    assert [b for b in out.breakpoints if b.tier == "tools"] == []
    assert Breakpoint("system", 0, "1h") in out.breakpoints
    assert "cache_control" not in wire_request(out)["tools"][-1]


def test_a_tool_marker_moved_onto_the_first_system_block_keeps_its_ttl() -> None:
    """A caller's 1-hour marker on a tool stays a 1-hour marker on ``system[0]``, also when the
    prefix itself is cached for 5 minutes."""
    out = sent(PromptCache(conversation=False, prefix_ttl="5m"), Breakpoint("tools", 1, "1h"))
    assert out.breakpoints == (Breakpoint("system", 0, "1h"), Breakpoint("system", 1, "5m"))


def test_the_cache_scope_block_is_byte_stable_across_releases() -> None:
    """Its bytes open every cached prefix: a change makes every tenant write its prefix again.
    16 hex digits of a SHA-256 of the tenant id, never the id itself."""
    from hango.agent.promptcache import SCOPE_SOURCE, tenant_scope

    assert tenant_scope("acme") == Block("cache scope: f532209f42b4711d", SCOPE_SOURCE)


def test_every_request_starts_with_the_tenants_own_cache_scope(db: Database, tenant: str,
                                                                capsys: Any) -> None:
    from hango.agent.promptcache import SCOPE_SOURCE, tenant_scope
    from hango.agents import create_tenant
    from hango.notebook import show_request

    other = create_tenant(db, tenant + "-b")
    first = []
    for t in (tenant, tenant, other):
        save_agent(db, t, "a1", AgentConfig(system_prompt="Be brief."))
        first.append(Agent(db, t, "a1", SimulatedModel()).run("hi").requests[0].system[0])
    assert first[0] == first[1] == tenant_scope(tenant)  # byte-stable within a tenant
    assert first[0].source == SCOPE_SOURCE and first[2] == tenant_scope(other) != first[0]
    assert tenant not in first[0].text and other not in first[2].text  # a digest, not the id
    body = wire_request(Agent(db, tenant, "a1", SimulatedModel()).run("hi").requests[0])
    assert body["system"][0] == {"type": "text", "text": first[0].text}  # first on the wire
    show_request(Agent(db, tenant, "a1", SimulatedModel()).run("hi").requests[0])
    assert f"  [0] {SCOPE_SOURCE}" in capsys.readouterr().out


def test_a_tenant_reads_nothing_another_tenant_wrote_with_the_same_prompt(
        db: Database, tenant: str, api_url: str) -> None:
    """Tenant B guesses tenant A's system prompt and memory exactly, on the server's one model:
    its usage and status are those of a first run; only A's own second run reads the cache."""
    import uuid

    import httpx

    from hango.agents import create_tenant, create_token

    prompt = f"You answer questions about invoices ({uuid.uuid4().hex}). " + "Be exact. " * 600
    memory = b"The user prefers short answers. " * 40
    answers = {}
    for name, t in (("a", tenant), ("b", create_tenant(db, tenant + "-b")), ("a again", tenant)):
        save_agent(db, t, "a1", AgentConfig(system_prompt=prompt))
        headers = {"Authorization": f"Bearer {create_token(db, t, 'owner')}"}
        with httpx.Client(base_url=api_url, headers=headers, timeout=60) as c:
            assert c.put("/v1/agents/a1/files/memories/AGENTS.md", content=memory).is_success
            got = c.post("/v1/agents/a1/runs", json={"prompt": "What is owed?"})
            assert got.status_code == 201, got.text
            answers[name] = got.json()
    a, b, again = answers["a"], answers["b"], answers["a again"]
    assert a["usage"][0]["cache_creation_input_tokens"] > 1024  # A wrote its prefix
    assert again["usage"][0]["cache_read_input_tokens"] > 1024  # and A reads it back
    assert [u["cache_read_input_tokens"] for u in b["usage"]] == [0]
    assert (b["status"], b["usage"], b["cache_read_ratio"]) == (
        a["status"], a["usage"], a["cache_read_ratio"])  # as if A had never run


# --- the conversation breakpoint --------------------------------------------------------------


def _cache_request(n_system_marks: int, messages: int) -> Any:
    from hango.models.base import Block, Breakpoint, Message, Request

    return Request(model="m", tools=(), system=tuple(Block(f"b{i}", f"s{i}") for i in range(4)),
                   messages=tuple(Message("user", f"m{i}") for i in range(messages)),
                   breakpoints=tuple(Breakpoint("system", i, "5m")
                                     for i in range(n_system_marks)))


def test_no_conversation_breakpoint_without_messages() -> None:
    from hango.agent.promptcache import PromptCache

    sent = PromptCache(prefix_ttl="5m").wrap_model_call(
        None, _cache_request(1, 0), lambda r: r)  # type: ignore[arg-type]
    assert [b.tier for b in sent.breakpoints] == ["system"]


def test_the_conversation_breakpoint_takes_the_fourth_slot_not_a_fifth() -> None:
    from hango.agent.promptcache import PromptCache

    cache = PromptCache(prefix_ttl="5m")
    sent = cache.wrap_model_call(None, _cache_request(3, 2), lambda r: r)  # type: ignore[arg-type]
    assert [(b.tier, b.index) for b in sent.breakpoints][-1] == ("messages", 1)
    assert len(sent.breakpoints) == 4
    full = cache.wrap_model_call(None, _cache_request(4, 2), lambda r: r)  # type: ignore[arg-type]
    assert [b.tier for b in full.breakpoints] == ["system"] * 4
