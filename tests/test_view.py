"""The one rendering: `show_request`'s table byte for byte, the JSON view, the full text, why the
cache read nothing.

Hango.models.view: the one rendering of a request for people (notebooks, traces, HTTP).
"""

from __future__ import annotations

import contextlib
import io
import json

from hango.models.base import (
    Block,
    Breakpoint,
    CacheDiagnostics,
    Message,
    Request,
    Response,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from hango.models.simulated import SimulatedModel
from hango.models.view import MISS_REASONS, miss_legend, miss_reason, render, request_view
from hango.notebook import show_request

REQUEST = Request(
    "hango-sim-1",
    (ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),
     ToolSpec("ls", "List")),
    (Block("You are helpful. " * 20, "base"), Block("## Skills\n- csv: read csv files", "skills"),
     Block("", "empty"), Block("Answer in French.\n", "/memories/AGENTS.md")),
    (Message("user", "hi"), Message("assistant", "", (ToolCall("c1", "ls", {"path": "/"}),)),
     Message("user", "", (), (ToolResult("c1", "a\nb"),))),
    (Breakpoint("system", 1, "1h"), Breakpoint("messages", 2)),
)

# What show_request prints (notebooks compare it byte for byte): each block's billed tokens.
TABLE = """\
tools: read_file, ls  (~58 tokens)
system blocks (tokens: the text's bytes / 4, plus 3 per block):
  [0] base                   ~   88 tok  You are helpful. You are helpful. You are helpful. You are …
  [1] skills                 ~   11 tok  ## Skills - csv: read csv files  <- cache breakpoint
  [2] empty                  ~    0 tok  \n\
  [3] /memories/AGENTS.md    ~    8 tok  Answer in French.
messages: 3; breakpoints: system[1], messages[2]"""


def test_show_request_prints_the_views_table() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        show_request(REQUEST)
    assert out.getvalue() == TABLE + "\n"
    assert render(request_view(REQUEST)) == TABLE


def test_the_view_is_plain_json_with_sources_sizes_and_breakpoints() -> None:
    view = request_view(REQUEST)
    assert json.loads(json.dumps(view)) == view  # JSON-able as it is, for a view over HTTP
    assert [(b["index"], b["source"], b["breakpoint"]) for b in view["system"]] == [
        (0, "base", None), (1, "skills", "1h"), (2, "empty", None), (3, "/memories/AGENTS.md", None)]
    memory = view["system"][3]
    assert (memory["bytes"], memory["tokens"], memory["text"]) == (18, 8, "Answer in French.\n")
    assert view["system_breakpoint"] == 1
    assert view["messages"][2]["breakpoint"] == "5m"
    assert view["messages"][1]["tool_calls"] == [{"id": "c1", "name": "ls", "arguments": {"path": "/"}}]
    assert view["breakpoints"] == [{"tier": "system", "index": 1, "ttl": "1h"},
                                   {"tier": "messages", "index": 2, "ttl": "5m"}]
    assert "usage" not in view  # no response given


def test_full_text_puts_every_block_under_its_heading() -> None:
    text = render(request_view(REQUEST), width=None)
    lines = text.splitlines()
    skills = lines.index("  [1] skills                 ~   11 tok  <- cache breakpoint")
    assert lines[skills + 1:skills + 3] == ["      ## Skills", "      - csv: read csv files"]
    assert "  [3] /memories/AGENTS.md    ~    8 tok" in lines
    assert '  [1] assistant calls ls {"path": "/"} (id c1)' in lines
    assert "  [2] user result for c1: a\n      b" in text  # a text's next lines stay indented
    assert lines.index("  [0] base                   ~   88 tok") < skills


def test_a_response_adds_usage_and_why_the_cache_read_nothing() -> None:
    model = SimulatedModel()
    response = model.complete(REQUEST)
    view = request_view(REQUEST, response)
    assert view["response"]["id"] == "msg_sim_000001"
    assert view["usage"]["cache_read_input_tokens"] == 0
    assert view["miss_reason"] == "below_minimum"  # the prefix is under the model's minimum
    assert view["miss"] == MISS_REASONS["below_minimum"]
    text = render(view)
    assert text.splitlines()[-1] == f"cache: below_minimum: {MISS_REASONS['below_minimum']}"


def test_miss_reason_rules() -> None:
    hit = Response("", usage=Usage(1, 0, 10, 1), diagnostics=CacheDiagnostics(None))
    assert miss_reason(REQUEST, hit) is None
    said = Response("", usage=Usage(10, 0, 5, 1), diagnostics=CacheDiagnostics("system_changed"))
    assert miss_reason(REQUEST, said) == "system_changed"  # a partial read says why too
    silent = Response("", usage=Usage(10, 0, 0, 1))
    assert miss_reason(REQUEST, silent) == "unknown"  # a provider without diagnostics
    unmarked = Request("m", (), (Block("x"),), (Message("user", "hi"),))
    assert miss_reason(unmarked, silent) == "no_breakpoint"
    assert miss_reason(REQUEST, Response("", usage=Usage())) is None  # an empty prompt
    assert set(MISS_REASONS) >= {"previous_message_not_found", "below_minimum", "expired",
                                 "system_changed", "no_breakpoint", "unknown"}


def test_miss_legend_lists_every_reason_in_words() -> None:
    lines = miss_legend().splitlines()
    assert lines == [f"{reason}: {why}" for reason, why in MISS_REASONS.items()]


def test_the_mark_is_where_the_cached_prefix_ends_not_on_every_marker() -> None:
    two = Request("m", (), (Block("a", "base"), Block("b", "skills"), Block("c", "memory")),
                  (Message("user", "hi"),), (Breakpoint("system", 0), Breakpoint("system", 1)))
    for width in (60, None):
        marked = [line for line in render(request_view(two), width).splitlines()
                  if "<- cache breakpoint" in line]
        assert len(marked) == 1 and marked[0].startswith("  [1] skills"), width
