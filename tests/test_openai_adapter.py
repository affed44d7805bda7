"""``OpenAIModel`` through the official ``openai`` SDK, over real HTTP, to a server on 127.0.0.1.

The server speaks the documented Chat Completions contract: ``POST /v1/chat/completions`` with
``messages`` and ``tools``; an assistant ``message`` with ``content`` and ``tool_calls`` (their
``arguments`` a JSON string); ``usage`` with ``prompt_tokens`` (the cached part inside it) and
``prompt_tokens_details.cached_tokens``. It prices what it *receives* by the automatic prefix
rules, so a test sees the cached tokens a real server would report for those bytes.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hango.agent import proposals
from hango.agent.promptcache import tenant_scope
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.base import (
    Block,
    Breakpoint,
    InvalidRequest,
    Message,
    ModelError,
    Request,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from hango.models.chat import chat_request
from hango.models.openai import OpenAIModel, from_setting
from hango.models.prefixcache import PrefixCache, PrefixRules, rendered, rendered_tokens
from hango.models.simulated import SimulatedModel
from hango.settings import SettingsError, load_settings

Reply = dict[str, Any] | tuple[int, Any]  # an assistant message, or (status, raw JSON body)


@dataclass
class Server:
    url: str  # the base URL, ending in /v1, as OPENAI_BASE_URL would be
    received: list[dict[str, Any]] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    cache: PrefixCache = field(default_factory=lambda: PrefixCache(PrefixRules("exact")))
    details: bool = True  # report prompt_tokens_details (vLLM without its option does not)

    def answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        reply = self.replies.pop(0) if self.replies else {"content": "ok"}
        if isinstance(reply, tuple):
            return reply
        usage, read, _ = self.cache.price(body["model"], 0.0, rendered_tokens(body))
        out: dict[str, Any] = {"prompt_tokens": usage.total_input_tokens, "completion_tokens": 3,
                               "total_tokens": usage.total_input_tokens + 3}
        if self.details:
            out["prompt_tokens_details"] = {"cached_tokens": read, "audio_tokens": 0}
        calls = reply.get("tool_calls")
        return 200, {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop",
                         "message": {"role": "assistant", "content": None, **reply}}],
            "usage": out}


def call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # loopback only, even if a proxy is configured
    state = Server("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.received.append({"path": self.path, "body": body,
                                   "headers": {k.lower(): v for k, v in self.headers.items()}})
            status, reply = state.answer(body)
            data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def model_for(server: Server, name: str = "qwen2.5:7b") -> OpenAIModel:
    return OpenAIModel(name, api_key="test-key", base_url=server.url, max_retries=0)


SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
FULL = Request(
    model="qwen2.5:7b",
    tools=(ToolSpec("read_file", "Read a file.", SCHEMA), ToolSpec("ls", "List files.")),
    system=(Block("You are hango.", "system_prompt"), Block("Skills: none.", "skills"),
            Block("# /memories/AGENTS.md\nLikes tea.", "/memories/AGENTS.md")),
    messages=(
        Message("user", "What is in a.md?"),
        Message("assistant", "Let me look.", tool_calls=(
            ToolCall("call_1", "read_file", {"path": "a.md"}), ToolCall("call_2", "ls"))),
        Message("user", "Thanks.", tool_results=(
            ToolResult("call_1", "# A"), ToolResult("call_2", "no such dir", is_error=True))),
    ),
    breakpoints=(Breakpoint("system", 1, "1h"), Breakpoint("messages", 2)),
    max_tokens=512,
)


def test_request_shape_tools_and_where_memory_goes(server: Server) -> None:
    model_for(server).complete(FULL)
    [sent] = server.received
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == "Bearer test-key"
    assert sent["body"] == {
        "model": "qwen2.5:7b", "max_tokens": 512,
        "tools": [
            {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                              "parameters": SCHEMA}},
            {"type": "function", "function": {"name": "ls", "description": "List files.",
                                              "parameters": {"type": "object", "properties": {}}}},
        ],
        "messages": [
            {"role": "system", "content": "You are hango.\n\nSkills: none."},
            {"role": "user", "content": "# /memories/AGENTS.md\nLikes tea.\n\nWhat is in a.md?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                call("read_file", '{"path":"a.md"}'), call("ls", "{}", "call_2")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "# A"},
            {"role": "tool", "tool_call_id": "call_2", "content": "no such dir"},
            {"role": "user", "content": "Thanks."},
        ],
    }
    assert sent["body"] == chat_request(FULL)  # the one renderer, byte for byte


def test_memory_after_the_breakpoint_lands_after_the_tools_in_the_rendered_stream() -> None:
    """The index assertion on this wire: a block after the system breakpoint is rendered after
    the tools, the base prompt and the skills index; a block before it, before the tools."""
    def start_of(request: Request, text: str) -> tuple[int, int]:
        segments = rendered(chat_request(request))
        for at, segment in enumerate(segments):
            joined = b"".join(t for t in segment.tokens if isinstance(t, bytes)).decode()
            if text in joined:
                return at, [s.label for s in segments].index("tools")
        raise AssertionError(f"{text!r} not rendered")

    memory_at, tools_at = start_of(FULL, "Likes tea.")
    assert FULL.system_breakpoint is not None and FULL.system_breakpoint < 2  # memory after it
    assert memory_at > tools_at
    assert start_of(FULL, "Skills: none.")[0] < tools_at
    wrong = Request(FULL.model, FULL.tools, FULL.system, FULL.messages,
                    (Breakpoint("system", 2),))  # memory before the breakpoint
    assert start_of(wrong, "Likes tea.")[0] < tools_at


def test_cached_tokens_are_inside_prompt_tokens_and_an_unreported_read_is_unknown(
        server: Server) -> None:
    def usage(details: Any) -> Usage:
        reply = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": "hi"}}],
                 "usage": {"prompt_tokens": 2006, "completion_tokens": 9, "total_tokens": 2015,
                           **({} if details is None else {"prompt_tokens_details": details})}}
        server.replies.append((200, reply))
        return model_for(server).complete(FULL).usage

    assert usage({"cached_tokens": 1920}) == Usage(86, 0, 1920, 9)  # OpenAI's own example
    assert usage({"cached_tokens": 1024, "cache_write_tokens": 900}) == Usage(82, 900, 1024, 9)
    for unreported in (None, {"audio_tokens": 0}, {"cached_tokens": None}):
        u = usage(unreported)
        assert u == Usage(2006, 0, None, 9)
        assert (u.cache_read_input_tokens, u.read_ratio, u.total_input_tokens) == (None, None, 2006)
    assert (Usage(1, 0, 5) + Usage(2, 0, None)).cache_read_input_tokens is None
    with pytest.raises(ModelError, match="does not add up"):
        usage({"cached_tokens": 3000})


def test_a_run_with_tool_calls_and_cached_tokens(server: Server, db: Database, tenant: str) -> None:
    """The whole stack: a tool call goes out, its result comes back as a ``tool`` message, and
    the second call reads from the server's cache everything up to the new turn."""
    save_agent(db, tenant, "a1", AgentConfig(system_prompt="You are hango. " * 200))
    PostgresBackend(db, tenant, "a1").write("/memories/AGENTS.md", "- The user likes tea.\n")
    server.replies += [{"tool_calls": [call("ls", {"path": "/memories"})]}, {"content": "Done."}]
    result = Agent(db, tenant, "a1", model_for(server)).run("What do you remember?")
    assert (result.status, result.text) == ("done", "Done.")
    first, second = (r["body"] for r in server.received)
    # The first user turn opens with the tenant's cache scope (a template may start the stream
    # there), then memory, then the user's text.
    scope = tenant_scope(tenant).text
    assert first["messages"][0]["content"].startswith(scope)
    assert first["messages"][1]["content"].startswith(f'{scope}\n\n<memory path="/memories/AGENTS.md">')
    assert second["messages"][:2] == first["messages"][:2]
    assert second["messages"][2]["tool_calls"][0]["function"] == {
        "name": "ls", "arguments": '{"path":"/memories"}'}
    assert second["messages"][3]["role"] == "tool"
    assert second["messages"][3]["tool_call_id"] == "call_1"
    assert "AGENTS.md" in second["messages"][3]["content"]
    reads = [r.usage.cache_read_input_tokens for r in result.responses]
    assert reads[0] == 0 and reads[1] == len(rendered_tokens(first)) - 0  # all of call 1
    assert result.usage.total_input_tokens == sum(
        len(rendered_tokens(r["body"])) for r in server.received)


def test_the_simulator_prices_what_the_adapter_sends(server: Server, db: Database,
                                                     tenant: str) -> None:
    """The same run on the server and on ``SimulatedModel(caching="automatic")`` (same rules):
    the same bodies, the same prompt usage per call."""
    save_agent(db, tenant, "a1", AgentConfig(system_prompt="Be brief. " * 300))
    script = [{"tool_calls": [call("ls", {"path": "/"})]}, {"content": "Done."}]
    server.replies += [dict(r) for r in script]
    real = Agent(db, tenant, "a1", model_for(server, "m")).run("hi")
    sim_model = SimulatedModel("m", caching="automatic", rules=PrefixRules("exact"),
                               policy=[[ToolCall("call_1", "ls", {"path": "/"})], "Done."])
    sim = Agent(db, tenant, "a1", sim_model).run("hi")
    def prompt(u: Usage) -> tuple[int, int, int | None]:  # output tokens are each model's own
        return u.input_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens

    assert [prompt(r.usage) for r in sim.responses] == [prompt(r.usage) for r in real.responses]
    assert sim.responses[1].usage.cache_read_input_tokens  # the second call read the first
    assert [chat_request(q) for q in sim.requests] == [r["body"] for r in server.received]


def test_a_resume_after_a_proposal_reads_the_interrupted_prefix(server: Server, db: Database,
                                                                tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(system_prompt="You are hango. " * 200,
                                              reserved_writes="ask"))
    server.replies += [{"tool_calls": [call("write_file", {"path": "/memories/AGENTS.md",
                                                             "content": "- Tea.\n"})]},
                       {"content": "Saved."}]
    agent = Agent(db, tenant, "a1", model_for(server))
    paused = agent.run("Remember that I like tea.")
    assert paused.status == "interrupted"
    proposals.approve(db, tenant, "a1", paused.interrupt["proposal_id"], by="me", role="owner")
    resumed = agent.resume(paused.run_id)
    assert (resumed.status, resumed.text) == ("done", "Saved.")
    before, after = (r["body"] for r in server.received)
    assert after["messages"][:3] == before["messages"] + [after["messages"][2]]
    assert after["messages"][3]["role"] == "tool" and after["messages"][3]["tool_call_id"] == "call_1"
    assert resumed.responses[0].usage.cache_read_input_tokens == len(rendered_tokens(before))
    assert PostgresBackend(db, tenant, "a1").read("/memories/AGENTS.md").content == "- Tea.\n"


def test_an_unreported_read_is_unknown_in_the_trace_metrics_and_http_answer(
        server: Server, db: Database, tenant: str, telemetry_pair: Any) -> None:
    """vLLM without --enable-prompt-tokens-details: no cache attribute, no read-ratio point and no
    cache_read tokens counted, where a 0 would claim a miss; the run summary says null."""
    from hango.agent.runs import summary

    telemetry, exporter, reader = telemetry_pair
    server.details = False
    save_agent(db, tenant, "a1", AgentConfig())
    result = Agent(db, tenant, "a1", model_for(server), telemetry=telemetry).run("hi")
    [chat] = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    attributes = dict(chat.attributes or {})
    assert "gen_ai.usage.cache_read.input_tokens" not in attributes
    assert "hango.cache.read_ratio" not in attributes
    assert attributes["gen_ai.usage.input_tokens"] == result.usage.total_input_tokens > 0
    metrics = {m.name: m for rm in reader.get_metrics_data().resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics}
    assert "hango.cache.read_ratio" not in metrics
    kinds = {dict(p.attributes)["hango.token.kind"] for p in metrics["hango.tokens"].data.data_points}
    assert "cache_read" not in kinds and "input" in kinds
    out = summary(result)
    assert out["usage"][0]["cache_read_input_tokens"] is None and out["cache_read_ratio"] is None


# --- faults: a clear model error naming the endpoint; the run failed, nothing raised -----------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("reply", "words"), [
    ((500, {"error": {"message": "model 'qwen9' not found"}}), r"answered HTTP 500: model 'qwen9' not found"),
    ((200, {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "hi"}}]}), "with no usage"),
    ({"tool_calls": [call("ls", "{not json")]}, r"malformed tool call: the arguments of 'ls'"),
    ({"tool_calls": [call("ls", "[1, 2]")]}, "are not a JSON object"),
    ((200, {"id": "c", "object": "chat.completion", "choices": []}), "without a choice"),
])
def test_a_bad_answer_fails_the_run_with_a_model_error(
        server: Server, db: Database, tenant: str, reply: Reply, words: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig())
    server.replies.append(reply)
    result = Agent(db, tenant, "a1", model_for(server)).run("hi", record=True)
    assert (result.status, result.stop_reason) == ("failed", "model_error")
    assert f"the model qwen2.5:7b at {server.url}" in result.warnings[-1]
    assert re.search(words, result.warnings[-1]), result.warnings
    with db.tenant(tenant) as conn:
        row = conn.execute("SELECT status, result FROM runs WHERE run_id = %s",
                           [result.run_id]).fetchone()
    assert row[0] == "failed" and row[1]["stop_reason"] == "model_error"  # kept, not lost


def test_an_endpoint_that_is_down_is_named(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig())
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    model = OpenAIModel("llama3.2", api_key="k", base_url=url, max_retries=0, timeout=5)
    result = Agent(db, tenant, "a1", model).run("hi")
    assert result.status == "failed"
    assert f"the model llama3.2 at {url} cannot be reached" in result.warnings[-1]
    with pytest.raises(ModelError, match="cannot be reached"):
        model.complete(FULL)


def test_a_tool_outside_the_allowlist_is_refused_as_today(server: Server, db: Database,
                                                          tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(tools=["ls"]))
    server.replies += [{"tool_calls": [call("write_file", {"path": "/x", "content": "y"})]},
                       {"content": "ok"}]
    result = Agent(db, tenant, "a1", model_for(server)).run("write /x")
    tool = server.received[1]["body"]["messages"][-1]
    assert tool["role"] == "tool" and tool["content"].startswith("refused: tool 'write_file'")
    assert [t["function"]["name"] for t in server.received[0]["body"]["tools"]] == ["ls"]
    assert result.status == "done"


def test_a_resume_whose_model_fails_stays_resumable(server: Server, db: Database,
                                                    tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask"))
    server.replies += [{"tool_calls": [call("write_file", {"path": "/memories/x.md",
                                                             "content": "x"})]},
                       (503, {"error": {"message": "loading model"}}), {"content": "ok"}]
    agent = Agent(db, tenant, "a1", model_for(server))
    paused = agent.run("remember x")
    proposals.approve(db, tenant, "a1", paused.interrupt["proposal_id"], by="me", role="owner")
    with pytest.raises(ModelError, match="HTTP 503: loading model"):
        agent.resume(paused.run_id)
    assert agent.resume(paused.run_id).status == "done"  # resumable again


# --- HANGO_MODEL=openai:<model>, over HTTP ----------------------------------------------------


def test_hango_model_openai_uses_the_sdks_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from hango.api.runs import model_from_settings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(SettingsError, match="set OPENAI_API_KEY for OpenAI, or OPENAI_BASE_URL"):
        model_from_settings(load_settings(model="openai:gpt-4.1-mini"))
    with pytest.raises(SettingsError, match="name the model after 'openai:'"):
        from_setting("openai:")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    model = model_from_settings(load_settings(model="openai:qwen2.5:7b"))
    assert isinstance(model, OpenAIModel)
    assert (model.name, model.endpoint) == ("qwen2.5:7b", "http://localhost:11434/v1")


def test_a_run_over_http_with_the_endpoint_down_is_failed_and_kept(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    tid = create_tenant(db, "o-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig())
    app = create_app(db, load_settings(model="openai:llama3.2"))
    base, stop = serve_in_thread(app)
    try:
        client = httpx.Client(base_url=f"{base}/v1/agents/a1", timeout=60, headers={
            "Authorization": f"Bearer {create_token(db, tid, 'member')}"})
        r = client.post("/runs", json={"prompt": "hi"})
        out = r.json()
        assert (r.status_code, out["status"], out["stop_reason"]) == (201, "failed", "model_error")
        assert f"the model llama3.2 at {url} cannot be reached" in out["warnings"][-1]
        assert "Traceback" not in r.text
        assert client.get(f"/runs/{out['run_id']}").json()["status"] == "failed"
    finally:
        stop()


# --- the renderer refuses what the Messages API renderer refuses -------------------------------


texts = st.sampled_from(["", "  ", "hello", "x" * 90, "é" * 7])
calls_ = st.lists(st.builds(ToolCall, st.sampled_from(["t1", "t2"]), st.sampled_from(["ls", "f"]),
                            st.sampled_from([{}, {"path": "a"}])), max_size=2)
results_ = st.lists(st.builds(ToolResult, st.sampled_from(["t1", "t2"]), texts, st.booleans()),
                    max_size=2)
messages_ = st.lists(st.one_of(
    st.builds(Message, st.just("user"), texts, tool_results=results_.map(tuple)),
    st.builds(Message, st.just("assistant"), texts, tool_calls=calls_.map(tuple))),
    min_size=1, max_size=4)
requests_ = st.builds(
    Request, st.just("m"),
    st.lists(st.builds(ToolSpec, st.sampled_from(["ls", "glob"]), texts), max_size=2).map(tuple),
    st.lists(st.builds(Block, texts), max_size=3).map(tuple), messages_.map(tuple),
    st.lists(st.builds(Breakpoint, st.just("system"), st.integers(-1, 3)), max_size=1).map(tuple))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(req=requests_)
def test_every_request_is_sent_as_priced_or_refused_by_both_alike(server: Server,
                                                                  req: Request) -> None:
    server.received.clear()
    sim = SimulatedModel("m", caching="automatic", rules=PrefixRules("exact"))
    try:
        model_for(server, "m").complete(req)
    except InvalidRequest as sent:
        with pytest.raises(InvalidRequest) as priced:
            sim.complete(req)
        assert str(priced.value) == str(sent) and server.received == []
        return
    [got] = server.received
    assert got["body"] == chat_request(req)
    assert sim.complete(req).usage.total_input_tokens == len(rendered_tokens(got["body"]))
    assert all(m.get("content") is None or m["content"].strip() or m["role"] == "tool"
               for m in got["body"]["messages"])

