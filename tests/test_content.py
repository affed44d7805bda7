"""The capture switch and its values; the conventions' shapes with each block's source; the cap (fair
cuts, then the oldest messages); no content unless asked.

Hango.telemetry.content: the prompt in the trace, opt-in and bounded, from the one view.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hango import telemetry as t
from hango.models.base import Block, Breakpoint, Message, Request, Response, ToolCall, ToolResult, Usage
from hango.models.view import render, request_view
from hango.telemetry.content import capture_from_env, chat_content, fair_share, run_content, size

REQUEST = Request(
    "claude-test", (),
    (Block("You are a helpful agent.", "system_prompt"), Block("## Skills\n- csv", "skills"),
     Block('<memory path="/memories/AGENTS.md">\nAnswer in French.\n</memory>', "/memories/AGENTS.md")),
    (Message("user", "which skills?"), Message("assistant", "", (ToolCall("c1", "ls", {"path": "/"}),)),
     Message("user", "", (), (ToolResult("c1", "refused: no", is_error=True),))),
    (Breakpoint("system", 1, "1h"),))
RESPONSE = Response("Voilà.", (), Usage(10, 0, 0, 2), "claude-test", "end_turn", id="msg_7")


@pytest.mark.parametrize(("value", "on"), [
    (None, False), ("", False), ("NO_CONTENT", False), ("false", False), ("EVENT_ONLY", False),
    ("SPAN_ONLY", True), ("span_and_event", True), ("true", True), (" True ", True)])
def test_the_switch_reads_the_genai_instrumentations_variable(value: str | None, on: bool) -> None:
    env = {} if value is None else {t.CAPTURE_CONTENT_ENV: value}
    assert capture_from_env(env) is on


def test_an_unknown_switch_value_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT='yes'"):
        capture_from_env({t.CAPTURE_CONTENT_ENV: "yes"})


def test_chat_content_follows_the_conventions_with_each_blocks_source() -> None:
    got = chat_content(REQUEST, RESPONSE, t.CONTENT_MAX_BYTES)
    system = json.loads(got[t.GEN_AI_SYSTEM_INSTRUCTIONS])
    assert [(p["type"], p["source"]) for p in system] == [
        ("text", "system_prompt"), ("text", "skills"), ("text", "/memories/AGENTS.md")]
    assert [p["content"] for p in system] == [b.text for b in REQUEST.system]
    assert [p.get("cache_breakpoint") for p in system] == [None, "1h", None]
    assert json.loads(got[t.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "which skills?"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "ls",
                                         "arguments": {"path": "/"}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                                    "response": "refused: no", "is_error": True}]}]
    assert json.loads(got[t.GEN_AI_OUTPUT_MESSAGES]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Voilà."}],
         "finish_reason": "end_turn"}]
    # the viewers' input pane: the people's rendering, the same function show_request uses
    assert got[t.INPUT_VALUE] == render(request_view(REQUEST, RESPONSE), width=None)
    assert "  [1] skills" in got[t.INPUT_VALUE] and "<- cache breakpoint" in got[t.INPUT_VALUE]
    assert (got[t.OUTPUT_VALUE], got[t.INPUT_MIME_TYPE]) == ("Voilà.", "text/plain")


def test_the_cap_cuts_long_texts_fairly_and_keeps_short_ones_whole() -> None:
    big = Block("x" * 100_000, "base")
    request = Request("m", (), (big, *REQUEST.system[1:]), REQUEST.messages, REQUEST.breakpoints)
    got = chat_content(request, RESPONSE, 8192)
    assert size(got) <= 8192
    system = json.loads(got[t.GEN_AI_SYSTEM_INSTRUCTIONS])
    assert system[2]["content"] == REQUEST.system[2].text  # the memory block is whole
    assert system[0]["content"].endswith("… [cut: " + system[0]["content"].split("[cut: ")[1])
    assert "of 100000 bytes]" in system[0]["content"]
    assert t.ATTR_CONTENT_OMITTED_MESSAGES not in got


def test_the_oldest_messages_go_when_texts_alone_cannot_fit() -> None:
    many = tuple(Message("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(400))
    request = Request("m", (), REQUEST.system, many, ())
    got = chat_content(request, RESPONSE, 4096)
    assert size(got) <= 4096
    kept = json.loads(got[t.GEN_AI_INPUT_MESSAGES])
    assert got[t.ATTR_CONTENT_OMITTED_MESSAGES] == 400 - len(kept)
    assert kept[-1]["parts"][0]["content"] == "message 399"  # the newest message stays


def test_fair_share() -> None:
    assert fair_share([10, 20], 100) is None
    assert fair_share([10, 1000, 1000], 510) == 250  # the short text keeps its 10 bytes
    assert fair_share([5, 5, 5], 9) == 3


def test_run_content_is_bounded_too() -> None:
    got = run_content("x" * 10_000, "done", 1000)
    assert len(got[t.INPUT_VALUE].encode()) <= 500 + 40 and got[t.OUTPUT_VALUE] == "done"
    assert run_content(None, None, 1000) == {}


@pytest.fixture
def spans() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


@pytest.mark.parametrize("capture", [True, False])
def test_telemetry_puts_content_on_the_chat_span_only_when_asked(
        spans: tuple[InMemorySpanExporter, TracerProvider], capture: bool) -> None:
    exporter, provider = spans
    tel = t.Telemetry(provider, MeterProvider(), logging.getLogger("hango.test"),
                      capture_content=capture)
    with tel.run_span(tenant_id="t1", agent_id="a1", run_id="r1", provider="x", model="m",
                      prompt="which skills?") as run:
        with tel.chat_span(REQUEST, "x") as chat:
            tel.record_chat(chat, RESPONSE, model="m", attributes={}, request=REQUEST)
        tel.finish_run(run, tenant_id="t1", agent_id="a1", run_id="r1", status="done",
                       read_ratio=0.0, output="Voilà.", attributes={})
    by_name = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    content = {t.GEN_AI_SYSTEM_INSTRUCTIONS, t.GEN_AI_INPUT_MESSAGES, t.GEN_AI_OUTPUT_MESSAGES,
               t.INPUT_VALUE, t.OUTPUT_VALUE}
    assert (content <= set(by_name["chat claude-test"])) is capture
    if not capture:
        assert not content & set(by_name["chat claude-test"])
        assert not {t.INPUT_VALUE, t.OUTPUT_VALUE} & set(by_name[t.SPAN_RUN])
    else:
        assert (by_name[t.SPAN_RUN][t.INPUT_VALUE], by_name[t.SPAN_RUN][t.OUTPUT_VALUE]) == (
            "which skills?", "Voilà.")


def test_the_default_follows_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(t.CAPTURE_CONTENT_ENV, raising=False)
    assert t.Telemetry().capture_content is False
    monkeypatch.setenv(t.CAPTURE_CONTENT_ENV, "SPAN_ONLY")
    assert t.Telemetry().capture_content is True
    monkeypatch.setenv(t.CAPTURE_CONTENT_ENV, "maybe")
    with pytest.raises(ValueError, match="maybe"):
        t.Telemetry()
