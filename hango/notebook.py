"""Readable views for the notebooks: a request as a table of blocks, usage per call.

Everything here prints plain, deterministic text (no ids, no clocks), so nbval can compare the
committed outputs of the course with what the code produces today.
"""

from __future__ import annotations

import getpass
import logging
import re
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from hango.agent.runtime import Agent, RunResult
from hango.agents import COURSE_AGENT, AgentConfig, create_tenant, create_token, drop_tenant, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.api.client import ApiError, FilesClient, Unreachable
from hango.db import Database, get_database
from hango.fs.backend import PostgresBackend
from hango.models.base import Model, Request, Response
from hango.models.view import render, request_view
from hango.telemetry import Configured, configure


def learner_name(setting: str | None = None) -> str:
    """``HANGO_LEARNER`` when set, else the login name (made fit for the table: other characters
    become ``-``)."""
    if setting is not None:
        return setting
    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's arbitrary user)
        login = "learner"
    return re.sub(r"[^A-Za-z0-9._@-]", "-", login)[:64] or "learner"


def show_request(request: Request, width: int = 60) -> None:
    """Print the tools, the system blocks (with the breakpoint marked) and the messages.

    The text of :func:`hango.models.view.render`: the same view the trace's opt-in content
    carries."""
    print(render(request_view(request), width))


def show_index(request: Request) -> None:
    """Print the skills index block exactly as the model sees it."""
    for block in request.system:
        if block.source == "skills":
            print(block.text)
            return
    print("(no skills index in this request)")


def usage_rows(responses: Sequence[Response]) -> list[dict[str, object]]:
    """One row per call; a read the provider did not report is ``None`` (unknown), not 0."""
    rows: list[dict[str, object]] = []
    for i, response in enumerate(responses, 1):
        u = response.usage
        reason = response.diagnostics.miss_reason if response.diagnostics else None
        ratio = u.read_ratio
        rows.append({"call": i, "input": u.input_tokens, "cache_write": u.cache_creation_input_tokens,
                     "cache_read": u.cache_read_input_tokens, "prompt": u.total_input_tokens,
                     "read_ratio": None if ratio is None else round(ratio, 3),
                     "miss_reason": reason or "-"})
    return rows


def show_usage(responses: Sequence[Response], convention: str = "anthropic") -> None:
    """Print one line per model call. ``"anthropic"``: uncached input, cache writes, cache
    reads, read ratio, why not read. ``"openai"``: the whole prompt, the cached part inside it,
    paid writes, read ratio. An unreported read shows as ``?``."""
    def known(value: object, width: int, digits: str = "") -> str:
        return f"{'?':>{width}}" if value is None else f"{value:>{width}{digits}}"

    openai = convention == "openai"
    print(f"{'call':>4} {'prompt' if openai else 'input':>7} "
          f"{'cached' if openai else 'write':>7} {'write' if openai else 'read':>7} "
          f"{'ratio':>6}" + ("" if openai else "  why not read"))
    for row in usage_rows(responses):
        if openai:
            print(f"{row['call']:>4} {row['prompt']:>7} {known(row['cache_read'], 7)} "
                  f"{row['cache_write']:>7} {known(row['read_ratio'], 6, '.3f')}")
        else:
            print(f"{row['call']:>4} {row['input']:>7} {row['cache_write']:>7} "
                  f"{known(row['cache_read'], 7)} {known(row['read_ratio'], 6, '.3f')}  "
                  f"{row['miss_reason']}")


def show_warnings(result: RunResult) -> None:
    """Print what a run warned about and the span events it recorded (the 'why' of a run)."""
    print("warnings:" if result.warnings else "warnings: (none)")
    for warning in result.warnings:
        print("  -", warning)
    print("events:" if result.events else "events: (none)")
    for event in result.events:
        attrs = ", ".join(f"{k}={v!r}" for k, v in event.attributes.items())
        print(f"  - {event.name}: {attrs}")


class TenantTaken(RuntimeError):
    """Another kernel (a copy of this notebook, or the same one opened twice) restarted this
    notebook's tenant: its tokens, agents and files are gone or are the other kernel's now."""


class CourseClient(FilesClient):
    """A :class:`FilesClient` that, on ``401``, checks whether another kernel took the tenant and
    says so instead of a bare "unknown bearer token"."""

    def __init__(self, course_check: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._course_check = course_check

    def _send(self, method: str, url: str, **kwargs: Any) -> Any:
        try:
            return super()._send(method, url, **kwargs)
        except ApiError as exc:
            if exc.status == 401:
                self._course_check()
            raise


def _generation(db: Database, tenant: str) -> object:
    """The tenant's creation time: a new value means someone dropped and recreated it."""
    with db.tenant(tenant) as conn:
        row = conn.execute("SELECT created_at FROM tenants WHERE tenant_id = %s", [tenant]).fetchone()
    return None if row is None else row[0]


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
    telemetry: Configured
    _stop: Callable[[], None]
    learner: str = "learner"  # whose exercise progress check() records (HANGO_LEARNER)
    _runs: count[int] = field(default_factory=lambda: count(1))
    _generation: object = None
    shared: Shared | None = None  # the workshop's shared server, when settings name one
    on_server: bool = False  # the agent is on the shared server (start(..., http_only=True))
    owner: FilesClient = field(init=False)
    member: FilesClient = field(init=False)

    def check_tenant(self) -> None:
        """Raise :class:`TenantTaken` if another kernel restarted this notebook's tenant."""
        if self.on_server:  # the seat is the learner's own on the shared server: nobody resets it
            return
        if _generation(self.db, self.tenant) != self._generation:
            raise TenantTaken(
                f"another notebook restarted tenant {self.tenant!r} after this one did (a copy of "
                "this notebook, or the same notebook open twice). Close the other one, then run "
                "this notebook again from its first cell.")

    def backend(self, agent_id: str | None = None) -> PostgresBackend:
        return PostgresBackend(self.db, self.tenant, agent_id or self.agent_id)

    def agent(self, model: Model, agent_id: str | None = None, **kwargs: Any) -> Agent:
        """An :class:`Agent` with deterministic run ids (``run-1``, ``run-2``, …)."""
        self.check_tenant()
        kwargs.setdefault("telemetry", self.telemetry.telemetry)
        kwargs.setdefault("run_ids", lambda: f"run-{next(self._runs)}")
        return Agent(self.db, self.tenant, agent_id or self.agent_id, model, **kwargs)

    def client(self, token: str, agent_id: str | None = None) -> FilesClient:
        return CourseClient(self.check_tenant, self.base_url, token, agent_id or self.agent_id)

    def close(self) -> None:
        self._stop()
        self.owner.close()
        self.member.close()
        if self.shared is not None:
            self.shared.seat.close()
        self.telemetry.shutdown()


@dataclass
class Shared:
    """A workshop's shared server (``HANGO_SERVER_URL``) and the learner's seat on it (the
    tenant of ``HANGO_TOKEN``): :func:`~hango.exercises.check` records each check there too,
    and the instructor's ``hango workshop room`` reads them."""

    url: str
    seat: FilesClient  # the learner's token; its routes need no agent
    tenant: str
    seat_token: str = field(repr=False, default="")

    def record(self, exercise_id: str, passed: bool, message: str) -> None:
        self.seat.record_check(exercise_id, passed, message)

    def passed(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.seat.progress()["passed"].items()}


def _shared(url: str | None, token: str | None) -> Shared | None:
    if url is None:
        return None
    if token is None:
        raise ValueError("HANGO_SERVER_URL names a shared server but HANGO_TOKEN is unset: set it "
                         "to the token of your line of the workshop's CSV (docs/workshop.md)")
    seat = FilesClient(url.rstrip("/"), token, COURSE_AGENT)
    try:
        tenant = str(seat.progress()["tenant"])
    except (ApiError, Unreachable) as exc:
        seat.close()
        raise ValueError(f"the shared server {url} (HANGO_SERVER_URL) did not take HANGO_TOKEN: "
                         f"{exc}") from None
    return Shared(url.rstrip("/"), seat, tenant, token)


def start(tenant: str, agent_id: str = COURSE_AGENT, config: AgentConfig | None = None,
          model: Model | None = None, http_only: bool = False) -> Course:
    """Start a notebook from a clean slate: drop and recreate ``tenant``, serve the API.

    ``model`` is the model of runs over HTTP (``POST .../runs``; default: ``HANGO_MODEL``);
    those runs get the same deterministic run ids and in-memory telemetry as ``course.agent``.

    With a shared server (``HANGO_SERVER_URL`` and ``HANGO_TOKEN``) the checks are recorded there
    too; and a notebook that talks to its agent only over HTTP (``http_only=True``) runs it
    there, as an agent named ``tenant`` in the learner's seat, with the server's model.
    """
    logging.getLogger("hango").setLevel(logging.ERROR)  # warnings reach RunResult.warnings
    db = get_database()
    shared = _shared(db.settings.server_url, db.settings.token)
    if shared is not None and http_only:
        return _on_server(db, shared, tenant, config)
    drop_tenant(db, tenant)
    create_tenant(db, tenant)
    save_agent(db, tenant, agent_id, config or AgentConfig())
    app = create_app(db)
    telemetry, runs = configure("memory"), count(1)
    app.state.hango_model = model
    app.state.hango_telemetry = telemetry.telemetry
    app.state.hango_run_ids = lambda: f"run-{next(runs)}"
    base_url, stop = serve_in_thread(app)
    course = Course(db, tenant, agent_id, base_url, telemetry, stop,
                    learner=learner_name(db.settings.learner), _runs=runs,
                    _generation=_generation(db, tenant), shared=shared)
    course.owner = course.client(create_token(db, tenant, "owner", "notebook"))
    course.member = course.client(create_token(db, tenant, "member", "notebook"))
    return course


def _on_server(db: Database, shared: Shared, name: str, config: AgentConfig | None) -> Course:
    """The notebook's agent on the shared server: agent ``name`` in the learner's seat, made
    afresh (its config, no files, no pending proposal) and a member token of its own, revoked
    at :meth:`Course.close` (an earlier one of the same notebook is revoked here)."""
    owner = FilesClient(shared.url, shared.seat_token, name)
    owner.put_agent(config or AgentConfig())
    for path in list(owner.iter_glob("/**")):
        owner.delete(path)
    for proposal in owner.proposals("pending"):
        owner.reject(proposal["proposal_id"], "the notebook was started again from its first cell")
    label = f"notebook {name}"
    for token in owner.tokens():
        if token["label"] == label and token["role"] == "member":
            owner.revoke_token(token["id"])
    secret, token_id = owner.create_token("member", label)

    def stop() -> None:
        with suppress(ApiError, Unreachable):
            owner.revoke_token(token_id)

    course = Course(db, shared.tenant, name, shared.url, configure("memory"), stop,
                    learner=learner_name(db.settings.learner), shared=shared, on_server=True)
    course.owner = owner
    course.member = FilesClient(shared.url, secret, name)
    return course
