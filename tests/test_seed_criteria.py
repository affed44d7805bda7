"""The chapter's one integration criterion, end to end through the real doors.

An owner writes ``/memories/AGENTS.md`` and a ``SKILL.md`` over HTTP; the next run's request has
the skills index *before* the cache breakpoint and the memory block *after* it; the agent's own
write to the same file is refused and nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import parity
import pytest
from parity import Stacks

from hango.agents import AgentConfig, create_token, save_agent
from hango.db import Database
from hango.models.simulated import SimulatedModel, tool_call

stacks = parity.both  # the parity fixture: each test on the plain and the cached stack

SKILL = "---\nname: invoices\ndescription: Read and total invoices.\n---\n# Invoices\nSum them.\n"


@pytest.fixture
def owner_http(db: Database, tenant: str, api_url: str) -> Iterator[httpx.Client]:
    save_agent(db, tenant, "assistant", AgentConfig(tools=["read_file", "write_file", "edit_file"]))
    token = create_token(db, tenant, "owner", "seed-criteria")
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def test_owner_writes_memory_over_http_and_the_next_run_has_it_after_the_breakpoint(
        db: Database, tenant: str, owner_http: httpx.Client, stacks: Stacks) -> None:
    files = "/v1/agents/assistant/files"
    put = owner_http.put(f"{files}/memories/AGENTS.md", content="Answer in French.")
    assert put.status_code in (200, 201), put.text
    assert owner_http.put(f"{files}/skills/invoices/SKILL.md", content=SKILL).status_code in (200, 201)

    model = SimulatedModel(policy=[
        [tool_call("write_file", {"path": "/memories/AGENTS.md", "content": "Answer in Klingon."})],
        [tool_call("edit_file", {"path": "/memories/AGENTS.md", "old_string": "French",
                                 "new_string": "Klingon"})],
        "d'accord",
    ])
    result = stacks.agent(db, tenant, "assistant", model).run("hello")

    first = result.requests[0]
    sources = [block.source for block in first.system]
    breakpoint_at = first.system_breakpoint
    assert breakpoint_at is not None
    memory_at = sources.index("/memories/AGENTS.md")
    skills_at = sources.index("skills")
    assert skills_at <= breakpoint_at < memory_at
    assert "Answer in French." in first.system[memory_at].text
    assert "invoices" in first.system[skills_at].text and "Sum them." not in first.system[skills_at].text

    refusals = [r for m in result.messages for r in m.tool_results]
    assert len(refusals) == 2 and all(r.is_error for r in refusals)
    assert all("/memories/" in r.content for r in refusals)
    after = owner_http.get(f"{files}/memories/AGENTS.md")
    assert after.text == "Answer in French." and after.headers["ETag"] == put.headers["ETag"]
    assert result.text == "d'accord"
