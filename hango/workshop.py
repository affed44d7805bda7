"""Provisioning a workshop: one tenant, one owner token and one agent per learner, at once.

``hango workshop provision --learners 30`` does in one process and ONE transaction what 90
``hango tenant/token/agent create`` commands would do in 90 processes (each opening the database
and applying the schema): nothing is half-written, and a running server is not disturbed. The
result is printed as CSV, one learner a line, to hand out (the tokens are shown only this once).
"""

from __future__ import annotations

import csv
import io
import secrets
from dataclasses import dataclass

from hango.agent.base_prompt import BASE_PROMPT
from hango.agents import AgentConfig, _check_id, create_seats
from hango.db import Database

MAX_LEARNERS = 1000


@dataclass(frozen=True)
class Seat:
    """One learner's place: their tenant, their agent and their owner token."""

    tenant: str
    agent: str
    token: str


def provision(db: Database, learners: int, prefix: str = "learner", agent: str = "a1",
              config: AgentConfig | None = None) -> list[Seat]:
    """Tenants ``{prefix}-01`` ... with an owner token and ``agent`` each, in one transaction.

    ``config`` defaults to :data:`~hango.agent.base_prompt.BASE_PROMPT` and the default tools, so
    a learner's runs over HTTP read their prefix from the cache. Existing tenants and agents are
    kept as they are (re-running only mints new tokens)."""
    if not 1 <= learners <= MAX_LEARNERS:
        raise ValueError(f"learners must be between 1 and {MAX_LEARNERS}, got {learners}")
    width = max(2, len(str(learners)))
    tenants = [_check_id("tenant id", f"{prefix}-{i:0{width}d}") for i in range(1, learners + 1)]
    _check_id("agent id", agent)
    seats = [Seat(t, agent, "hango_" + secrets.token_urlsafe(24)) for t in tenants]
    create_seats(db, [(s.tenant, s.agent, s.token) for s in seats],
                 config or AgentConfig(system_prompt=BASE_PROMPT))
    return seats


def as_csv(seats: list[Seat]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["tenant", "agent", "role", "token"])
    writer.writerows([s.tenant, s.agent, "owner", s.token] for s in seats)
    return out.getvalue()
