"""Several processes edit `/memories/AGENTS.md` through the API at once: `If-Match` loses no update,
PUT without it is last-writer-wins, concurrent PATCH edits never lose lines.

Several processes edit ``/memories/AGENTS.md`` through the files API at the same moment.

The server is the session's (``api_url``: uvicorn on loopback) over the real database; each writer is a
separate Python *process* (``subprocess``) with its own HTTP connection, all released at once by
a start time. What the API promises, and what these tests hold it to:

- **PUT with If-Match** (read the version, append a line, write at that version, retry on 412):
  no update is lost. The final file holds every accepted line exactly once and its version is
  ``1 + accepted writes``; the versions the writes got are exactly ``2 .. 1 + accepted``.
- **PUT without If-Match**: last writer wins. Every PUT is applied (versions ``2 .. 1 + n``, each
  once) and the file is exactly the body of the write that got the highest version; lines that
  other writers appended in between are lost, by design: that is what If-Match is for.
- **PATCH (edit) without If-Match**: atomic per request. The backend reads the row with
  ``SELECT ... FOR UPDATE`` and writes it in the same transaction, so concurrent edits serialise
  on the row lock and each one replaces text in the latest content: appends made by replacing an
  end marker never lose each other's lines.

Sizes: ``HANGO_CONCURRENCY_WRITERS`` processes (default 4) x ``HANGO_CONCURRENCY_EDITS`` edits
each (default 25).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import pytest

from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend

WRITERS = int(os.environ.get("HANGO_CONCURRENCY_WRITERS", "4"))
EDITS = int(os.environ.get("HANGO_CONCURRENCY_EDITS", "25"))
MEMORY = "/memories/AGENTS.md"
END = "<END>"

# One writer process. argv: base_url token agent writer_id edits mode start_at
WORKER = r"""
import json, sys, time
import httpx

base, token, agent, wid, edits, mode, start_at = sys.argv[1:8]
edits, start_at = int(edits), float(start_at)
url = f"/v1/agents/{agent}/files/memories/AGENTS.md"
accepted, conflicts = [], 0
with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"},
                  timeout=60) as http:
    http.get("/v1/agents").raise_for_status()  # connect and warm up before the start
    while time.time() < start_at:
        time.sleep(0.001)
    for i in range(edits):
        line = f"w{wid}-{i:03d}"
        while True:
            if mode == "patch":
                r = http.patch(url, json={"old": "<END>", "new": line + "\n<END>"})
            else:
                got = http.get(url)
                got.raise_for_status()
                headers = {"If-Match": got.headers["ETag"]} if mode == "if-match" else {}
                body = got.text + line + "\n"
                r = http.put(url, content=body.encode(), headers=headers)
            if r.status_code == 412 and mode == "if-match":
                conflicts += 1
                continue
            r.raise_for_status()
            accepted.append({"line": line, "version": r.json()["version"],
                             "body": body if mode == "put" else None})
            break
print(json.dumps({"accepted": accepted, "conflicts": conflicts}))
"""


@dataclass
class Setup:
    db: Database
    tenant: str
    token: str
    url: str


@pytest.fixture(scope="module")
def setup(db: Database, api_url: str) -> Setup:
    tenant = create_tenant(db, "cc-" + uuid.uuid4().hex[:12])
    return Setup(db, tenant, create_token(db, tenant, "owner"), api_url)


@dataclass
class Outcome:
    content: str
    version: int
    accepted: list[dict[str, object]]
    conflicts: int


def run_writers(setup: Setup, mode: str, seed: str) -> Outcome:
    agent = "m" + uuid.uuid4().hex[:10]
    save_agent(setup.db, setup.tenant, agent, AgentConfig())
    backend = PostgresBackend(setup.db, setup.tenant, agent)
    assert backend.write(MEMORY, seed) == 1
    start_at = time.time() + 1.2  # every process is up and connected by then
    procs = [subprocess.Popen(
        [sys.executable, "-c", WORKER, setup.url, setup.token, agent, str(w), str(EDITS), mode,
         str(start_at)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(WRITERS)]
    accepted: list[dict[str, object]] = []
    conflicts = 0
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        report = json.loads(out)
        accepted += report["accepted"]
        conflicts += report["conflicts"]
    final = backend.read(MEMORY)
    return Outcome(final.content, final.version, accepted, conflicts)


def test_if_match_loses_no_update(setup: Setup) -> None:
    out = run_writers(setup, "if-match", "# Team notes\n")
    content, version, accepted, conflicts = out.content, out.version, out.accepted, out.conflicts
    lines = content.splitlines()[1:]
    assert len(accepted) == WRITERS * EDITS
    assert sorted(lines) == sorted(str(a["line"]) for a in accepted)  # each once, none lost
    assert version == 1 + len(accepted)
    assert sorted(int(str(a["version"])) for a in accepted) == list(range(2, 2 + len(accepted)))
    # each writer's own lines appear in the order it wrote them
    for w in range(WRITERS):
        mine = [line for line in lines if line.startswith(f"w{w}-")]
        assert mine == sorted(mine)
    # the test only means something if the writers really raced
    assert conflicts > 0, "no write ever conflicted: the writers did not overlap"
    print(f"\nif-match: {len(accepted)} accepted writes, {conflicts} 412 retries")


def test_put_without_if_match_is_last_writer_wins(setup: Setup) -> None:
    out = run_writers(setup, "put", "# Team notes\n")
    content, version, accepted = out.content, out.version, out.accepted
    assert len(accepted) == WRITERS * EDITS
    versions = sorted(int(str(a["version"])) for a in accepted)
    assert versions == list(range(2, 2 + len(accepted)))  # every PUT applied, one at a time
    assert version == 1 + len(accepted)
    last = max(accepted, key=lambda a: int(str(a["version"])))
    assert content == last["body"]  # the file is exactly the last writer's body
    lost = len(accepted) - (len(content.splitlines()) - 1)
    print(f"\nput without If-Match: {len(accepted)} writes applied, {lost} appended lines lost")


def test_concurrent_patch_edits_never_lose_lines(setup: Setup) -> None:
    out = run_writers(setup, "patch", f"# Team notes\n{END}")
    content, version, accepted = out.content, out.version, out.accepted
    lines = content.splitlines()
    assert lines[0] == "# Team notes" and lines[-1] == END
    assert len(accepted) == WRITERS * EDITS
    assert sorted(lines[1:-1]) == sorted(str(a["line"]) for a in accepted)  # none lost
    assert version == 1 + len(accepted)
    assert sorted(int(str(a["version"])) for a in accepted) == list(range(2, 2 + len(accepted)))
    for w in range(WRITERS):
        mine = [line for line in lines if line.startswith(f"w{w}-")]
        assert mine == sorted(mine)
