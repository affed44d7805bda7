"""`cache_control` lands on the positions the simulator marks; usage maps back.

``AnthropicModel`` through the real ``anthropic`` SDK, over real HTTP, to a stub on 127.0.0.1.

The stub records each request body and answers with a Messages API response, so these tests see
exactly what would go on the wire: where ``cache_control`` landed and how usage comes back.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.models.anthropic import AnthropicModel
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
    wire_request,
)
from hango.models.simulated import (
    BLOCK_OVERHEAD,
    MESSAGE_OVERHEAD,
    SimulatedModel,
    breakpoint_positions,
    count_tokens,
    positions,
)


@dataclass
class Stub:
    url: str
    received: list[dict[str, Any]] = field(default_factory=list)  # path, headers, body
    replies: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


def message_json(
    content: list[dict[str, Any]] | None = None,
    *,
    msg_id: str = "msg_01",
    stop_reason: str = "end_turn",
    **usage: Any,
) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content if content is not None else [{"type": "text", "text": "ok"}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 21,
            "output_tokens": 5,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            **usage,
        },
    }


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # loopback only, even if a proxy is configured
    state = Stub("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.received.append({"path": self.path, "headers": headers, "body": json.loads(raw)})
            status, reply = state.replies.pop(0) if state.replies else (200, message_json())
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
    thread.join()


def api_key(sent: dict[str, Any]) -> str | None:
    """The key as sent: ``x-api-key``, or ``authorization: Bearer`` in newer SDKs."""
    headers = sent["headers"]
    bearer = headers.get("authorization", "")
    return headers.get("x-api-key") or (bearer[7:] if bearer.startswith("Bearer ") else None)


def model_for(stub: Stub, **kwargs: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-6", api_key="test-key", base_url=stub.url, max_retries=0, **kwargs)


SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
FULL = Request(
    model="claude-sonnet-4-6",
    tools=(ToolSpec("read_file", "Read a file.", SCHEMA), ToolSpec("ls", "List files.")),
    system=(
        Block("You are hango.", "system_prompt"),
        Block("Skills: none.", "skills"),
        Block("Memory: likes tea.", "memory"),
    ),
    messages=(
        Message("user", "What is in a.md?"),
        Message(
            "assistant",
            "Let me look.",
            tool_calls=(ToolCall("toolu_1", "read_file", {"path": "a.md"}), ToolCall("toolu_2", "ls")),
        ),
        Message(
            "user",
            "Thanks.",
            tool_results=(ToolResult("toolu_1", "# A"), ToolResult("toolu_2", "no such dir", is_error=True)),
        ),
    ),
    breakpoints=(
        Breakpoint("tools", 1, ttl="1h"),
        Breakpoint("system", 1, ttl="1h"),
        Breakpoint("messages", 1),
        Breakpoint("messages", 2),
    ),
    max_tokens=512,
)
EPHEMERAL = {"type": "ephemeral"}
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}


def test_request_shape_and_where_cache_control_lands(stub: Stub) -> None:
    model_for(stub).complete(FULL)
    [sent] = stub.received
    assert sent["path"] == "/v1/messages"
    assert api_key(sent) == "test-key"
    assert "anthropic-version" in sent["headers"]
    body = sent["body"]
    assert (body["model"], body["max_tokens"]) == ("claude-sonnet-4-6", 512)
    assert body["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": SCHEMA},
        {
            "name": "ls",
            "description": "List files.",
            "input_schema": {"type": "object", "properties": {}},
            "cache_control": ONE_HOUR,
        },
    ]
    assert body["system"] == [
        {"type": "text", "text": "You are hango."},
        {"type": "text", "text": "Skills: none.", "cache_control": ONE_HOUR},
        {"type": "text", "text": "Memory: likes tea."},
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is in a.md?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.md"}},
                {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {}, "cache_control": EPHEMERAL},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "# A"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such dir", "is_error": True},
                {"type": "text", "text": "Thanks.", "cache_control": EPHEMERAL},
            ],
        },
    ]
    assert "diagnostics" not in body


def test_cache_control_lands_on_the_position_the_simulator_marks(stub: Stub) -> None:
    """Count wire blocks with the simulator's rule (tool_use / tool_result runs are one)."""
    model_for(stub).complete(FULL)
    body = stub.received[0]["body"]
    marked, count = [], 0
    for blk in [*body["tools"], *body["system"]]:
        marked += [count] if "cache_control" in blk else []
        count += 1
    for msg in body["messages"]:
        previous = None
        for blk in msg["content"]:
            kind = blk.get("type")
            if kind != previous or kind == "text":
                count += 1
            previous = kind
            marked += [count - 1] if "cache_control" in blk else []
    sim = positions(FULL)
    assert count == len(sim) == 10
    assert marked == [at for at, _ in breakpoint_positions(FULL)] == [1, 3, 7, 9]


def test_usage_text_and_tool_calls_map_back(stub: Stub) -> None:
    stub.replies.append(
        (
            200,
            message_json(
                [
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "b.md"}},
                ],
                stop_reason="tool_use",
                input_tokens=21,
                output_tokens=40,
                cache_creation_input_tokens=1200,
                cache_read_input_tokens=3000,
                cache_creation={"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 200},
            ),
        )
    )
    response = model_for(stub).complete(FULL)
    assert response == Response(
        "Reading.",
        (ToolCall("toolu_9", "read_file", {"path": "b.md"}),),
        Usage(
            input_tokens=21,
            cache_creation_input_tokens=1200,
            cache_read_input_tokens=3000,
            output_tokens=40,
            cache_creation_1h_input_tokens=200,
        ),
        model="claude-sonnet-4-6",
        stop_reason="tool_use",
        id="msg_01",  # gen_ai.response.id
    )


def test_null_cache_counts_become_zero(stub: Stub) -> None:
    stub.replies.append((200, message_json(cache_creation_input_tokens=None, cache_read_input_tokens=None)))
    response = model_for(stub).complete(FULL)
    assert response.usage == Usage(21, 0, 0, 5, 0)
    assert (response.text, response.tool_calls, response.diagnostics) == ("ok", (), None)


def test_a_plain_request_omits_tools_and_system_and_uses_the_model_name(stub: Stub) -> None:
    plain = Request(model="", tools=(), system=(), messages=(Message("user", "hi"),))
    AnthropicModel(
        "claude-haiku-4-5", anthropic.Anthropic(api_key="k2", base_url=stub.url, max_retries=0)
    ).complete(plain)
    body = stub.received[0]["body"]
    assert body == {
        "model": "claude-haiku-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert api_key(stub.received[0]) == "k2"


def test_diagnostics_are_opt_in_and_chain_the_previous_id(stub: Stub) -> None:
    stub.replies += [
        (
            200,
            {
                **message_json(msg_id="msg_A"),
                "diagnostics": {"cache_miss_reason": {"type": "previous_message_not_found"}},
            },
        ),
        (
            200,
            {
                **message_json(msg_id="msg_B"),
                "diagnostics": {
                    "cache_miss_reason": {"type": "system_changed", "cache_missed_input_tokens": 4000}
                },
            },
        ),
    ]
    model = model_for(stub, diagnostics=True)
    first, second = model.complete(FULL), model.complete(FULL)
    assert [r["body"]["diagnostics"] for r in stub.received] == [
        {"previous_message_id": None},
        {"previous_message_id": "msg_A"},
    ]
    assert first.diagnostics == CacheDiagnostics("previous_message_not_found", 0)
    assert second.diagnostics == CacheDiagnostics("system_changed", 4000)


def test_the_providers_400_reaches_the_caller(stub: Stub) -> None:
    text = "A maximum of 4 blocks with cache_control may be provided. Found 5."
    stub.replies.append((400, {"type": "error", "error": {"type": "invalid_request_error", "message": text}}))
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks"):
        model_for(stub).complete(FULL)



# --- the simulator prices exactly what the adapter sends ---


def recount(body: dict[str, Any]) -> tuple[int, list[tuple[int, str]]]:
    """Tokens and ``(position, ttl)`` markers of a *received* body, by the simulator's documented
    formula, written again here from the wire: so neither side can drift unseen."""
    total, marks, count = 0, [], 0

    def ttl(block: dict[str, Any]) -> str:
        return block["cache_control"].get("ttl", "5m")

    for tool in body.get("tools", []):
        spec = {k: v for k, v in tool.items() if k != "cache_control"}
        total += count_tokens(json.dumps(spec, sort_keys=True, ensure_ascii=False,
                                         separators=(",", ":"))) + BLOCK_OVERHEAD
        count += 1
        marks += [(count - 1, ttl(tool))] if "cache_control" in tool else []
    for blk in body.get("system", []):
        total += count_tokens(blk["text"]) + BLOCK_OVERHEAD
        count += 1
        marks += [(count - 1, ttl(blk))] if "cache_control" in blk else []
    for msg in body["messages"]:
        total += MESSAGE_OVERHEAD
        previous = None
        for blk in msg["content"]:
            kind = blk["type"]
            if kind == "tool_use":
                text = json.dumps({"name": blk["name"], "input": blk["input"]}, sort_keys=True,
                                  ensure_ascii=False, separators=(",", ":"))
            else:
                text = blk["content"] if kind == "tool_result" else blk["text"]
            total += count_tokens(text) + BLOCK_OVERHEAD
            if kind != previous or kind == "text":
                count += 1
            previous = kind
            marks += [(count - 1, ttl(blk))] if "cache_control" in blk else []
    return total, marks


texts = st.sampled_from(["", "  ", "hello", "x" * 90, "é" * 7])
tool_specs = st.builds(ToolSpec, st.sampled_from(["ls", "read_file", "glob"]), texts,
                       st.sampled_from([{}, SCHEMA]))
calls = st.lists(st.builds(ToolCall, st.sampled_from(["t1", "t2"]), st.sampled_from(["ls", "f"]),
                           st.sampled_from([{}, {"path": "a"}])), max_size=2)
results = st.lists(st.builds(ToolResult, st.sampled_from(["t1", "t2"]), texts, st.booleans()),
                   max_size=2)
messages = st.lists(st.one_of(
    st.builds(Message, st.just("user"), texts, tool_results=results.map(tuple)),
    st.builds(Message, st.just("assistant"), texts, tool_calls=calls.map(tuple))),
    min_size=1, max_size=4)
breakpoints = st.lists(st.builds(Breakpoint, st.sampled_from(["tools", "system", "messages"]),
                                 st.integers(-2, 3), st.sampled_from(["5m", "1h"])), max_size=5)
requests = st.builds(Request, st.just("claude-sonnet-4-6"), st.lists(tool_specs, max_size=3).map(tuple),
                     st.lists(st.builds(Block, texts), max_size=3).map(tuple),
                     messages.map(tuple), breakpoints.map(tuple))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(req=requests)
def test_every_request_is_sent_as_priced_or_refused_by_both_alike(stub: Stub, req: Request) -> None:
    """Each random request goes through the adapter (to the stub) and through the simulator."""
    stub.received.clear()
    sim = SimulatedModel("claude-sonnet-4-6", min_cacheable=1)
    try:
        model_for(stub).complete(req)
    except InvalidRequest as sent_error:
        with pytest.raises(InvalidRequest) as priced_error:
            sim.complete(req)
        assert str(priced_error.value) == str(sent_error)
        assert stub.received == []  # refused before anything went on the wire
        return
    [sent] = stub.received
    body = sent["body"]
    assert body == wire_request(req)
    response = sim.complete(req)
    tokens, marks = recount(body)
    assert response.usage.total_input_tokens == tokens
    assert list(zip(sim.traces[-1].breakpoints, [t for _, t in marks], strict=True)) == marks
    # what the provider refuses never goes out: empty text, two markers a block, 1h after 5m
    blocks = [*body.get("tools", []), *body.get("system", []),
              *(c for m in body["messages"] for c in m["content"])]
    assert all(b["text"].strip() for b in blocks if b.get("type") == "text")
    ttls = [b["cache_control"].get("ttl", "5m") for b in blocks if "cache_control" in b]
    assert len(ttls) <= 4 and ttls == sorted(ttls)  # "1h" < "5m": every 1h before every 5m
    assert all(t["input_schema"] for t in body.get("tools", []))


@pytest.mark.parametrize(("bad", "message"), [
    (Breakpoint("messages", -1), r"breakpoint messages\[-1\] is outside the request"),
    (Breakpoint("system", 3), r"breakpoint system\[3\] is outside the request"),
    (Breakpoint("messages", 2, "1h"),
     r"^messages\.2\.content\.2\.cache_control\.ttl: a ttl='1h' cache_control block must not "
     r"come after a ttl='5m' cache_control block"),
])
def test_both_models_refuse_the_same_requests_with_the_same_words(
        stub: Stub, bad: Breakpoint, message: str) -> None:
    req = Request("claude-sonnet-4-6", FULL.tools, FULL.system, FULL.messages,
                  (Breakpoint("messages", 1), bad))
    for model in (model_for(stub), SimulatedModel("claude-sonnet-4-6")):
        with pytest.raises(InvalidRequest, match=message):
            model.complete(req)
    assert stub.received == []


def test_a_tool_without_parameters_is_one_schema_on_the_wire_and_in_the_price(stub: Stub) -> None:
    """``{}`` and the explicit empty object schema are the same bytes sent, so the same entry."""
    sim = SimulatedModel("claude-sonnet-4-6", min_cacheable=1)
    for params in ({}, {"type": "object", "properties": {}}):
        req = Request("claude-sonnet-4-6", (ToolSpec("ls", "List.", params),), (),
                      (Message("user", "hi"),), (Breakpoint("tools", 0),))
        model_for(stub).complete(req)
        sim.complete(req)
    first, second = (r["body"]["tools"] for r in stub.received)
    assert first == second
    assert sim.calls[1][1].usage.cache_read_input_tokens > 0


# --- never an empty text block ---


def test_blank_system_blocks_are_left_out_and_their_marker_moves_back(stub: Stub) -> None:
    req = Request("claude-sonnet-4-6", (ToolSpec("ls", "List."),),
                  (Block(""), Block("Skills."), Block("  ")), (Message("user", "hi"),),
                  (Breakpoint("system", 2), Breakpoint("messages", 0)))
    model_for(stub).complete(req)
    body = stub.received[0]["body"]
    assert body["system"] == [{"type": "text", "text": "Skills.", "cache_control": EPHEMERAL}]
    only_blank = Request("claude-sonnet-4-6", (ToolSpec("ls", "List."),), (Block(""),),
                         (Message("user", "hi"),), (Breakpoint("system", 0, "1h"),))
    model_for(stub).complete(only_blank)
    body = stub.received[1]["body"]
    assert "system" not in body  # nothing to send, and the marker went to the last tool
    assert body["tools"][0]["cache_control"] == ONE_HOUR


def test_an_agent_with_an_empty_system_prompt_sends_no_empty_text_block(
        stub: Stub, db: Database, tenant: str) -> None:
    """The whole stack, against the stub: an empty base prompt, and then ``run("")``."""
    save_agent(db, tenant, "a1", AgentConfig(system_prompt=""))
    agent = Agent(db, tenant, "a1", model_for(stub))
    agent.run("hi")
    body = stub.received[-1]["body"]
    sent = [*body.get("system", []), *(c for m in body["messages"] for c in m["content"])]
    assert all(b["text"].strip() for b in sent if b["type"] == "text")
    assert [b for b in body.get("system", []) if not b["text"].strip()] == []
    marked = [b for b in [*body.get("tools", []), *sent] if "cache_control" in b]
    assert marked and all(b.get("text", "x").strip() for b in marked)
    before = len(stub.received)
    with pytest.raises(InvalidRequest, match=r"messages\[0\] \(user\) is empty"):
        agent.run("")
    with pytest.raises(InvalidRequest, match=r"messages\[0\] \(user\) is empty"):
        Agent(db, tenant, "a1", SimulatedModel()).run("   ")
    assert len(stub.received) == before  # refused before the wire
