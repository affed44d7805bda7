"""The course's pictures: the same run draws the same PNG bytes (nbval skips images, so this is
what keeps a committed picture honest), and each picture's text says what it was drawn from.

Drawn in two subprocesses with different hash seeds: a set's order, a dict built from one, or a
font or date in the PNG's metadata would make the bytes differ.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hango.db import Database

SCRIPT = r"""
import hashlib, sys, uuid
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.agent.runtime import Agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call
from hango.pictures import (draw_frontmatter, draw_narrowing, draw_pace, draw_path_rules,
                            draw_proposals, draw_request, draw_tenants)
from hango.settings import get_settings

db = Database(get_settings())
tenant = sys.argv[1]
drop_tenant(db, tenant)
create_tenant(db, tenant)
save_agent(db, tenant, "lead", AgentConfig(tools=["read_file", "ls", "task"], subagents=["helper"]))
save_agent(db, tenant, "helper", AgentConfig(tools=["read_file", "ls"]))
skill = "---\nname: audit\ndescription: Review.\nallowed-tools: read_file ls write_file\n---\n"
PostgresBackend(db, tenant, "lead").write("/memories/AGENTS.md", "- a fact\n")
PostgresBackend(db, tenant, "helper").write("/skills/audit/SKILL.md", skill)
result = Agent(db, tenant, "helper", SimulatedModel(policy=[
    [tool_call("read_file", {"path": "/skills/audit/SKILL.md"})], [tool_call("ls", {"path": "/"})],
    [tool_call("write_file", {"path": "/x", "content": "y"})], "done"])).run("audit")
grid = {(p, r, t): {s: (0.9 - p / 1000, 0.03 + p / 10000, []) for s in
                    ("default", "memory-before-cache", "baseline")}
        for p in (10, 30, 90, 400) for r in ("all", "longest") for t in ("5m", "1h")}
grid[90, "longest", "5m"]["default"] = (0.5, 0.05, [])
pictures = [
    draw_path_rules(["/memories/AGENTS.md", "/notes/../x", "/memorie/x"],
                    {"owner": "owner", "member": "member", "agent": None}),
    draw_frontmatter({"/skills/audit/SKILL.md": skill, "/skills/bad/SKILL.md": "---\nname: yes\n---\n"}),
    draw_narrowing(["read_file", "ls"], {"audit": ("read_file", "ls", "write_file")}, result),
    draw_tenants(db, [tenant]),
    draw_proposals([{"run_id": "run-1", "status": "done", "resumed": True},
                    {"run_id": "run-2", "status": "done"}],
                   [{"run_id": "run-1", "status": "approved", "edited": True}]),
    draw_pace(grid, [10, 30, 90, 400]),
    draw_request(result.requests[0], "a request"),
]
for picture in pictures:
    print(hashlib.sha256(picture.png()).hexdigest()[:16], repr(picture))
drop_tenant(db, tenant)
"""


def _draw(tenant: str, seed: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, tenant], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONHASHSEED": seed})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_the_same_run_draws_the_same_bytes_and_says_what_it_shows(db: Database) -> None:
    pytest.importorskip("matplotlib")
    first, second = _draw("t-pictures", "1"), _draw("t-pictures", "2")
    assert len(first) == 7 and first == second
    said = [line.split(" ", 1)[1] for line in first]
    assert said[0] == ("picture: 3 paths: 1 ordinary, 1 reserved, 1 rejected; check_write for "
                       "owner, member, agent")
    assert said[1] == "picture: 2 files: 1 read, 1 refused, each with its line and reason"
    assert said[2] == ("picture: the agent's allowlist: ['ls', 'read_file']; audit asks for: ['ls', "
                       "'read_file', 'write_file']; audit may use (∩): ['ls', 'read_file']; "
                       "3 tool calls, 1 refused")
    assert said[3] == ("picture: t-pictures: helper (1 files), lead (1 files, task -> helper)")
    assert said[4] == ("picture: done 1, interrupted 1, approved 0, edited 1, rejected 0, "
                       "pending 0, resumed 1")
    assert said[5].startswith("picture: 5 lines, one legend: memory after the breakpoint "
                              "(default), 1-hour prefix; memory after the breakpoint (default), "
                              "5-minute prefix, refresh=all; ")
    assert said[6].startswith("picture: a request: ")
