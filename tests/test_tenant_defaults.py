"""A tenant's defaults for its agents (hango.agent_config.TenantDefaults), set by an owner over
HTTP and with the CLI, read by every run: an agent's own config wins, the server's HANGO_*
settings stay the fallback; validated as an agent's config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hango.agent.base_prompt import BASE_PROMPT
from hango.agents import (
    AgentConfig,
    create_tenant,
    create_token,
    load_run_config,
    save_agent,
    save_tenant_defaults,
)
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.settings import load_settings

HANGO = str(Path(sys.executable).with_name("hango"))
SKILL = "---\nname: {0}\ndescription: Does {0}.\n---\nBody.\n"


@pytest.fixture(scope="module")
def served(db: Database) -> Iterator[str]:
    """A server whose fallback for reserved writes is ask (HANGO_RESERVED_WRITES=ask)."""
    url, stop = serve_in_thread(create_app(db, load_settings(reserved_writes="ask")))
    yield url
    stop()


@pytest.fixture
def tenant_id(db: Database) -> str:
    tid = create_tenant(db, "defaults-" + uuid.uuid4().hex[:10])
    save_agent(db, tid, "plain", AgentConfig(system_prompt=BASE_PROMPT))
    save_agent(db, tid, "own", AgentConfig(system_prompt=BASE_PROMPT, reserved_writes="refuse",
                                           memory=["/memories/own.md"], skills=["/skills/own/"]))
    files = PostgresBackend(db, tid, "plain")
    for agent in ("plain", "own"):
        files = PostgresBackend(db, tid, agent)
        for path, text in (("/memories/AGENTS.md", "- from AGENTS.md"),
                           ("/memories/team.md", "- from team.md"),
                           ("/memories/own.md", "- from own.md")):
            files.write(path, text)
        for name in ("shared", "team/pdf", "own/docx"):
            files.write(f"/skills/{name}/SKILL.md", SKILL.format(name.split("/")[-1]))
    return tid


def _client(db: Database, url: str, tenant_id: str, role: str) -> httpx.Client:
    return httpx.Client(base_url=f"{url}/v1", timeout=60, headers={
        "Authorization": f"Bearer {create_token(db, tenant_id, role)}"})


def _blocks(c: httpx.Client, agent: str, prompt: str) -> tuple[dict[str, object], list[str]]:
    run = c.post(f"/agents/{agent}/runs", json={"prompt": prompt}).json()
    (call, *_) = c.get(f"/agents/{agent}/runs/{run['run_id']}/prompt").json()["calls"]
    return run, [b["source"] + ":" + b["text"] for b in call["system"]]


def test_an_owner_sets_them_every_role_reads_them(db: Database, served: str,
                                                 tenant_id: str) -> None:
    owner, admin, member = (_client(db, served, tenant_id, r) for r in ("owner", "admin", "member"))
    empty = member.get("/tenant/defaults").json()
    assert empty == {"memory": None, "skills": None, "reserved_writes": None, "server": {
        "memory": ["/memories/AGENTS.md"], "skills": ["/skills/"], "reserved_writes": "ask"}}
    body = {"memory": ["/memories/team.md"], "skills": ["/skills/team"],
            "reserved_writes": "refuse"}
    for c in (admin, member):
        refused = c.put("/tenant/defaults", json=body)
        assert refused.status_code == 403 and "only an owner" in refused.json()["detail"]
    set_ = owner.put("/tenant/defaults", json=body).json()
    assert set_ | {"server": None} == {"memory": ["/memories/team.md"], "skills": ["/skills/team/"],
                                       "reserved_writes": "refuse", "server": None}
    assert member.get("/tenant/defaults").json() == set_
    assert owner.put("/tenant/defaults", json={"memory": None}).json()["skills"] is None  # a PUT


@pytest.mark.parametrize(("body", "why"), [
    ({"memory": ["/notes/x.md"]}, "memory (body): memory[0] '/notes/x.md': must be under "
                                  "/memories/"),
    ({"skills": ["/skills/../x"]}, "skills (body): skills[0] '/skills/../x': '..' segment is "
                                   "not allowed (paths are never resolved)"),
    ({"reserved_writes": "maybe"}, "reserved_writes (body): Input should be 'refuse' or 'ask'"),
    ({"tools": ["ls"]}, "tools (body): Extra inputs are not permitted"),
])
def test_they_are_validated_as_an_agents_config(db: Database, served: str, tenant_id: str,
                                                body: dict[str, object], why: str) -> None:
    got = _client(db, served, tenant_id, "owner").put("/tenant/defaults", json=body)
    assert (got.status_code, got.json()["detail"]) == (422, why)


def test_a_run_reads_them_and_an_agents_own_config_wins(db: Database, served: str,
                                                        tenant_id: str) -> None:
    owner = _client(db, served, tenant_id, "owner")
    # Nothing set: the server's settings (AGENTS.md, every skill, ask).
    run, blocks = _blocks(owner, "plain", "Remember that I like jazz.")
    assert run["status"] == "interrupted"
    assert [b.split(":")[0] for b in blocks] == ["tenant_cache_scope", "system_prompt", "skills",
                                                 "/memories/AGENTS.md"]
    assert "pdf" in blocks[2] and "docx" in blocks[2] and "shared" in blocks[2]
    owner.put("/tenant/defaults", json={"memory": ["/memories/team.md"],
                                        "skills": ["/skills/team/"], "reserved_writes": "refuse"})
    run, blocks = _blocks(owner, "plain", "Remember that I like jazz.")
    assert run["status"] == "done" and "reserved prefix /memories/" in str(run["text"])
    assert [b.split(":")[0] for b in blocks][3:] == ["/memories/team.md"]
    assert "pdf" in blocks[2] and "docx" not in blocks[2] and "shared" not in blocks[2]
    # The agent that names its own sources and mode keeps them.
    run, blocks = _blocks(owner, "own", "Remember that I like jazz.")
    assert [b.split(":")[0] for b in blocks][3:] == ["/memories/own.md"]
    assert "docx" in blocks[2] and "pdf" not in blocks[2]
    save_tenant_defaults(db, tenant_id, {"reserved_writes": "ask"})
    assert _blocks(owner, "plain", "Remember that I like jazz.")[0]["status"] == "interrupted"
    assert _blocks(owner, "own", "Remember that I like jazz.")[0]["status"] == "done"


def test_a_run_under_the_tenants_defaults_resumes_under_them(db: Database, served: str,
                                                             tenant_id: str) -> None:
    """The resume reads the config itself (no config handed to it): the same defaults apply."""
    owner = _client(db, served, tenant_id, "owner")
    save_tenant_defaults(db, tenant_id, {"memory": ["/memories/team.md"], "reserved_writes": "ask"})
    run = owner.post("/agents/own/runs", json={"prompt": "Remember that I like jazz."}).json()
    assert run["status"] == "done"  # its own config refuses
    run = owner.post("/agents/plain/runs", json={"prompt": "Remember that I like jazz."}).json()
    assert run["status"] == "interrupted" and run["proposal"]["path"] == "/memories/team.md"
    owner.post(f"/agents/plain/proposals/{run['proposal']['proposal_id']}/approve", json={})
    resumed = owner.post(f"/agents/plain/runs/{run['run_id']}/resume")
    assert resumed.status_code == 200 and resumed.json()["status"] == "done", resumed.text


def test_a_run_waiting_for_a_decision_does_not_resume_under_other_defaults(
        db: Database, served: str, tenant_id: str) -> None:
    owner = _client(db, served, tenant_id, "owner")
    run = owner.post("/agents/plain/runs", json={"prompt": "Remember that I like jazz."}).json()
    owner.post(f"/agents/plain/proposals/{run['proposal']['proposal_id']}/approve", json={})
    save_tenant_defaults(db, tenant_id, {"memory": ["/memories/team.md"]})
    resumed = owner.post(f"/agents/plain/runs/{run['run_id']}/resume")
    assert resumed.status_code == 409 and "config or model changed" in resumed.json()["detail"]


def test_one_query_reads_the_config_with_the_tenants_defaults(db: Database,
                                                              tenant_id: str) -> None:
    save_tenant_defaults(db, tenant_id, {"memory": ["/memories/team.md"]})
    config = load_run_config(db, tenant_id, "plain")
    assert config is not None and config.memory == ["/memories/team.md"]
    assert config.skills is None and config.reserved_writes is None  # the settings decide
    assert load_run_config(db, tenant_id, "own").memory == ["/memories/own.md"]  # type: ignore[union-attr]
    assert load_run_config(db, tenant_id, "nobody") is None


def _hango(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HANGO, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))


def test_the_cli_shows_and_sets_them(tenant_id: str) -> None:
    shown = _hango("tenant", "defaults", tenant_id)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["memory"] is None
    set_ = _hango("tenant", "defaults", tenant_id, "--memory", "/memories/team.md",
                  "--reserved-writes", "ask")
    assert set_.returncode == 0, set_.stderr
    assert {k: v for k, v in json.loads(set_.stdout).items() if k != "server"} == {
        "memory": ["/memories/team.md"], "skills": None, "reserved_writes": "ask"}
    unset = _hango("tenant", "defaults", tenant_id, "--unset", "memory")
    assert json.loads(unset.stdout)["memory"] is None
    assert json.loads(unset.stdout)["reserved_writes"] == "ask"  # only what it names changes
    bad = _hango("tenant", "defaults", tenant_id, "--memory", "/notes/x.md")
    assert bad.returncode == 1
    assert bad.stderr.strip() == "hango: error: memory[0] '/notes/x.md': must be under /memories/"
    missing = _hango("tenant", "defaults", "no-such-tenant-" + uuid.uuid4().hex[:6])
    assert missing.returncode == 1 and "no tenant" in missing.stderr
