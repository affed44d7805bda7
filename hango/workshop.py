"""Provisioning a workshop: one tenant, one owner token and one agent per learner, at once.

``hango workshop provision --learners 30`` does in one process and ONE transaction what 90
``hango tenant/token/agent create`` commands would do in 90 processes (each opening the database
and applying the schema): nothing is half-written, and a running server is not disturbed. The
result is printed as CSV, one learner a line, to hand out (the tokens are shown only this once).
Each learner's agent is ``assistant``, the name the README and the notebooks use.

Provisioning again keeps the tenants, agents and files and mints new tokens; the earlier ones
keep working unless ``revoke_earlier``. ``remove`` deletes the workshop's tenants after the day.
"""

from __future__ import annotations

import csv
import io
import secrets
from dataclasses import dataclass

from hango.agent.base_prompt import BASE_PROMPT
from hango.agents import COURSE_AGENT, AgentConfig, _check_id, add_agents, token_digest
from hango.db import Database

MAX_LEARNERS = 1000
AGENT = COURSE_AGENT


@dataclass(frozen=True)
class Seat:
    """One learner's place: their tenant, their agent and their owner token."""

    tenant: str
    agent: str
    token: str


@dataclass(frozen=True)
class Provisioned:
    """The seats, and what provisioning found: how many tenants are new, and the owner tokens an
    earlier provisioning made for the others (revoked, or still working)."""

    seats: list[Seat]
    created: int
    earlier_tokens: int
    revoked: bool

    def summary(self) -> str:
        existed = len(self.seats) - self.created
        said = [f"{len(self.seats)} learners: {self.created} tenants created"]
        if existed:
            said.append(f"{existed} existed (their agents and files are kept as they were)")
        said.append("one new owner token each, shown only this once")
        if self.earlier_tokens and self.revoked:
            said.append(f"{self.earlier_tokens} earlier workshop token(s) revoked")
        elif self.earlier_tokens:
            said.append(f"{self.earlier_tokens} earlier workshop token(s) still work "
                        "(--revoke-earlier revokes them)")
        return "; ".join(said)


def _tenants(learners: int, prefix: str) -> list[str]:
    if not 1 <= learners <= MAX_LEARNERS:
        raise ValueError(f"learners must be between 1 and {MAX_LEARNERS}, got {learners}")
    width = max(2, len(str(learners)))
    return [_check_id("tenant id", f"{prefix}-{i:0{width}d}") for i in range(1, learners + 1)]


def provision(db: Database, learners: int, prefix: str = "learner", agent: str = AGENT,
              config: AgentConfig | None = None, revoke_earlier: bool = False) -> Provisioned:
    """Tenants ``{prefix}-01`` ... with an owner token and ``agent`` each, in one transaction.

    ``config`` defaults to :data:`~hango.agent.base_prompt.BASE_PROMPT` and the default tools, so
    a learner's runs over HTTP read their prefix from the cache. Existing tenants and agents are
    kept as they are (re-running mints new tokens; ``revoke_earlier`` revokes the old ones)."""
    tenants = _tenants(learners, prefix)
    _check_id("agent id", agent)
    seats = [Seat(t, agent, "hango_" + secrets.token_urlsafe(24)) for t in tenants]
    earlier = "FROM api_tokens WHERE tenant_id = ANY(%s) AND role = 'owner' AND label = 'workshop'"
    with db.admin(all_tenants=True) as conn, conn.cursor() as cur:  # all the seats, or none
        row = cur.execute("SELECT count(*) FROM tenants WHERE tenant_id = ANY(%s)", [tenants]).fetchone()
        existing = int(row[0]) if row else 0
        row = cur.execute(f"SELECT count(*) {earlier}", [tenants]).fetchone()
        tokens = int(row[0]) if row else 0
        if revoke_earlier:
            cur.execute(f"DELETE {earlier}", [tenants])
        cur.executemany("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING",
                        [[s.tenant] for s in seats])
        add_agents(conn, [(s.tenant, s.agent) for s in seats],
                   config or AgentConfig(system_prompt=BASE_PROMPT))
        cur.executemany("INSERT INTO api_tokens (token_sha256, tenant_id, role, label)"
                        " VALUES (%s, %s, 'owner', 'workshop')",
                        [[token_digest(s.token), s.tenant] for s in seats])
    return Provisioned(seats, len(tenants) - existing, tokens, revoke_earlier)


def remove(db: Database, prefix: str = "learner") -> list[str]:
    """Delete every tenant ``{prefix}-NN`` with its agents, files, tokens and runs, in one
    transaction; return their ids."""
    _check_id("tenant id", f"{prefix}-01")  # the id rule allows no regular-expression metacharacter
    with db.admin(all_tenants=True) as conn:
        rows = conn.execute("DELETE FROM tenants WHERE tenant_id ~ %s RETURNING tenant_id",
                            [f"^{prefix}-[0-9]+$"]).fetchall()
    return sorted(str(r[0]) for r in rows)


def as_csv(seats: list[Seat]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["tenant", "agent", "role", "token"])
    writer.writerows([s.tenant, s.agent, "owner", s.token] for s in seats)
    return out.getvalue()
