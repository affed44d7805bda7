"""Readable views for the notebooks: a request as a table of blocks, usage per call.

Everything here prints plain, deterministic text (no ids, no clocks), so nbval can compare the
committed outputs of the course with what the code produces today.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from hango.agent.runtime import Agent, RunResult
from hango.agents import AgentConfig, create_tenant, create_token, drop_tenant, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.api.client import FilesClient
from hango.db import Database, get_database
from hango.fs.backend import PostgresBackend
from hango.models.base import Model, Request, Response
from hango.models.simulated import count_tokens, positions
from hango.telemetry import Configured, configure


def _preview(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def show_request(request: Request, width: int = 60) -> None:
    """Print the tools, the system blocks (with the breakpoint marked) and the messages."""
    tool_tokens = sum(p.tokens for p in positions(request) if p.tier == "tools")
    print(f"tools: {', '.join(t.name for t in request.tools) or '(none)'}  "
          f"(~{tool_tokens} tokens)")
    print("system blocks:")
    breakpoint_at = request.system_breakpoint
    for i, block in enumerate(request.system):
        mark = "  <- cache breakpoint" if i == breakpoint_at else ""
        print(f"  [{i}] {block.source:<22} ~{count_tokens(block.text):>5} tok  "
              f"{_preview(block.text, width)}{mark}")
    print(f"messages: {len(request.messages)}; breakpoints: "
          + ", ".join(f"{b.tier}[{b.index}]" for b in request.breakpoints))


def show_index(request: Request) -> None:
    """Print the skills index block exactly as the model sees it."""
    for block in request.system:
        if block.source == "skills":
            print(block.text)
            return
    print("(no skills index in this request)")


def usage_rows(responses: Sequence[Response]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for i, response in enumerate(responses, 1):
        u = response.usage
        reason = response.diagnostics.miss_reason if response.diagnostics else None
        rows.append({"call": i, "input": u.input_tokens, "cache_write": u.cache_creation_input_tokens,
                     "cache_read": u.cache_read_input_tokens, "read_ratio": round(u.read_ratio, 3),
                     "miss_reason": reason or "-"})
    return rows


def show_usage(responses: Sequence[Response]) -> None:
    """Print one line per model call: uncached input, cache writes, cache reads, read ratio."""
    print(f"{'call':>4} {'input':>7} {'write':>7} {'read':>7} {'ratio':>6}  why not read")
    for row in usage_rows(responses):
        print(f"{row['call']:>4} {row['input']:>7} {row['cache_write']:>7} "
              f"{row['cache_read']:>7} {row['read_ratio']:>6.3f}  {row['miss_reason']}")


def show_warnings(result: RunResult) -> None:
    """Print what a run warned about and the span events it recorded (the 'why' of a run)."""
    print("warnings:" if result.warnings else "warnings: (none)")
    for warning in result.warnings:
        print("  -", warning)
    print("events:" if result.events else "events: (none)")
    for event in result.events:
        attrs = ", ".join(f"{k}={v!r}" for k, v in event.attributes.items())
        print(f"  - {event.name}: {attrs}")


@dataclass
class Course:
    """One notebook's sandbox: a fresh tenant and agent, tokens, the files API over HTTP.

    ``owner`` and ``member`` are :class:`FilesClient` s for the agent's files, each with a
    bearer token of that role. ``telemetry`` keeps spans and metrics in memory.
    """

    db: Database
    tenant: str
    agent_id: str
    base_url: str
    owner: FilesClient
    member: FilesClient
    telemetry: Configured
    _stop: Callable[[], None]
    _runs: count[int] = field(default_factory=lambda: count(1))

    def backend(self, agent_id: str | None = None) -> PostgresBackend:
        return PostgresBackend(self.db, self.tenant, agent_id or self.agent_id)

    def agent(self, model: Model, agent_id: str | None = None, **kwargs: Any) -> Agent:
        """An :class:`Agent` with deterministic run ids (``run-1``, ``run-2``, …)."""
        kwargs.setdefault("telemetry", self.telemetry.telemetry)
        kwargs.setdefault("run_ids", lambda: f"run-{next(self._runs)}")
        return Agent(self.db, self.tenant, agent_id or self.agent_id, model, **kwargs)

    def client(self, token: str, agent_id: str | None = None) -> FilesClient:
        return FilesClient(self.base_url, token, agent_id or self.agent_id)

    def close(self) -> None:
        self.owner.close()
        self.member.close()
        self._stop()
        self.telemetry.shutdown()


def start(tenant: str, agent_id: str = "assistant", config: AgentConfig | None = None,
          model: Model | None = None) -> Course:
    """Start a notebook from a clean slate: drop and recreate ``tenant``, serve the API.

    ``model`` is the model of runs over HTTP (``POST .../runs``; default: ``HANGO_MODEL``);
    those runs get the same deterministic run ids and in-memory telemetry as ``course.agent``.
    """
    logging.getLogger("hango").setLevel(logging.ERROR)  # warnings reach RunResult.warnings
    db = get_database()
    drop_tenant(db, tenant)
    create_tenant(db, tenant)
    save_agent(db, tenant, agent_id, config or AgentConfig())
    app = create_app(db)
    telemetry, runs = configure("memory"), count(1)
    app.state.hango_model = model
    app.state.hango_telemetry = telemetry.telemetry
    app.state.hango_run_ids = lambda: f"run-{next(runs)}"
    base_url, stop = serve_in_thread(app)
    owner = FilesClient(base_url, create_token(db, tenant, "owner", "notebook"), agent_id)
    member = FilesClient(base_url, create_token(db, tenant, "member", "notebook"), agent_id)
    return Course(db, tenant, agent_id, base_url, owner, member, telemetry, stop, runs)
