"""Memory history and undo (hango/fs/history.py, hango/api/history.py) over real HTTP on
PostgreSQL: every door keeps the previous version under /memories/ and /skills/ (PUT, PATCH,
DELETE, approve, restore), bounded by HANGO_HISTORY_MAX_VERSIONS and counted in the quota; a
version is read, listed, diffed and restored; nothing is lost under concurrent writers."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.fs import history
from hango.fs.backend import PostgresBackend
from hango.models.base import Request
from hango.models.simulated import Reply, SimulatedModel, tool_call
from hango.settings import load_settings

MEMORY = "/memories/AGENTS.md"
KEEP = 3  # HANGO_HISTORY_MAX_VERSIONS of this module's server


@dataclass
class T:
    id: str
    owner: httpx.Client
    admin: httpx.Client
    member: httpx.Client


def _write_policy(request: Request) -> Reply:
    """Writes what the prompt says to MEMORY, then answers (an ask-mode agent: a proposal)."""
    last = request.messages[-1]
    if last.tool_results:
        return Reply("done")
    return Reply("", (tool_call("write_file", {"path": MEMORY, "content": last.text}),))


@pytest.fixture(scope="module")
def server(db: Database) -> Iterator[str]:
    settings = load_settings(history_max_versions=KEEP, tenant_max_bytes=64 * 1024,
                             max_file_bytes=16 * 1024)
    app = create_app(db, settings)
    app.state.hango_model = SimulatedModel(policy=_write_policy)
    url, stop = serve_in_thread(app)
    yield url
    stop()


def _tenant(db: Database, url: str) -> Iterator[T]:
    tid = create_tenant(db, "hist-" + uuid.uuid4().hex[:10])
    save_agent(db, tid, "a1", AgentConfig(reserved_writes="ask"))
    clients = [httpx.Client(base_url=f"{url}/v1/agents/a1", timeout=60,
                            headers={"Authorization": f"Bearer {create_token(db, tid, role)}"})
               for role in ("owner", "admin", "member")]
    yield T(tid, *clients)
    for c in clients:
        c.close()


@pytest.fixture
def t(db: Database, server: str) -> Iterator[T]:
    yield from _tenant(db, server)


@pytest.fixture
def other(db: Database, server: str) -> Iterator[T]:
    yield from _tenant(db, server)


def _versions(c: httpx.Client, path: str = MEMORY) -> list[dict[str, Any]]:
    got = c.get(f"/history{path}")
    assert got.status_code == 200, got.text
    return list(got.json()["versions"])


def _put(c: httpx.Client, text: str, path: str = MEMORY, **headers: str) -> int:
    got = c.put(f"/files{path}", content=text.encode(), headers=headers)
    assert got.is_success, got.text
    return int(got.json()["version"])


def test_every_door_keeps_the_previous_version_and_who_wrote_it(t: T) -> None:
    assert _put(t.owner, "- one\n") == 1
    assert t.admin.patch(f"/files{MEMORY}", json={"old": "one", "new": "two"}).is_success
    run = t.member.post("/runs", json={"prompt": "- three\n"}).json()  # the agent proposes
    proposal = run["proposal"]["proposal_id"]
    assert t.owner.post(f"/proposals/{proposal}/approve", json={}).json()["written_version"] == 3
    assert t.owner.post(f"/restore{MEMORY}", json={"version": 1}).json()["version"] == 4
    found = _versions(t.owner)
    assert [v["version"] for v in found] == [4, 3, 2, 1] and found[0]["current"]
    owner, admin = found[3]["written_by"], found[2]["written_by"]
    assert owner.startswith("owner:") and admin.startswith("admin:") and owner != admin
    assert (found[1]["proposal_id"], found[1]["written_by"]) == (proposal, owner)  # who approved
    assert (found[0]["restored_from"], found[0]["written_by"]) == (1, owner)
    assert [v["size"] for v in found] == [6, 8, 6, 6]
    texts = [t.member.get(f"/files{MEMORY}", params={"version": v}).text for v in (1, 2, 3, 4)]
    assert texts == ["- one\n", "- two\n", "- three\n", "- one\n"]
    assert t.member.get(f"/files{MEMORY}", params={"version": 2}).headers["etag"] == '"2"'


def test_a_version_no_longer_kept_is_410_naming_the_setting(t: T) -> None:
    for i in range(1, 7):
        assert _put(t.owner, f"v{i}") == i
    assert [v["version"] for v in _versions(t.owner)] == [6, 5, 4, 3]  # the current + KEEP
    gone = t.owner.get(f"/files{MEMORY}", params={"version": 2})
    assert gone.status_code == 410
    assert gone.json()["detail"] == (f"version 2 of {MEMORY} is no longer kept (the oldest kept "
                                     f"is 3): HANGO_HISTORY_MAX_VERSIONS={KEEP} keeps that many "
                                     "earlier versions of a file under /memories/ and /skills/")
    assert t.owner.post(f"/restore{MEMORY}", json={"version": 1}).status_code == 410
    never = t.owner.get(f"/files{MEMORY}", params={"version": 7})
    assert (never.status_code, never.json()["detail"]) == (
        404, f"{MEMORY} has no version 7: its newest is 6")
    # Outside the reserved prefixes only the current version exists.
    _put(t.owner, "a", "/notes/x.md")
    _put(t.owner, "b", "/notes/x.md")
    old = t.owner.get("/files/notes/x.md", params={"version": 1})
    assert old.status_code == 404 and "kept under /memories/ and /skills/ only" in old.text
    assert [v["version"] for v in _versions(t.owner, "/notes/x.md")] == [2]


def test_a_file_named_like_a_reserved_prefix_keeps_no_history(t: T) -> None:
    assert _put(t.owner, "one", "/memories") == 1
    assert _put(t.owner, "two", "/memories") == 2  # replaced, not kept: it is no memory file
    assert [v["version"] for v in _versions(t.owner, "/memories")] == [2]
    old = t.owner.get("/files/memories", params={"version": 1})
    assert old.status_code == 404 and "only its current version (2) is kept" in old.text


def test_another_tenants_history_is_404(t: T, other: T) -> None:
    _put(t.owner, "mine")
    _put(t.owner, "mine, later")
    for url in (f"/history{MEMORY}", f"/files{MEMORY}?version=1", f"/diff{MEMORY}?from=1"):
        got = other.owner.get(url)
        assert got.status_code == 404 and "mine" not in got.text, url
    restored = other.owner.post(f"/restore{MEMORY}", json={"version": 1})
    assert restored.status_code == 404
    nobody = str(t.owner.base_url).rstrip("/").rsplit("/", 1)[0] + "/nobody"
    wrong_agent = t.owner.get(f"{nobody}/history{MEMORY}")
    assert (wrong_agent.status_code, wrong_agent.json()["detail"]) == (
        404, "no agent 'nobody' in this tenant")


def test_the_diff_between_two_versions(t: T) -> None:
    _put(t.owner, "- tea\n")
    _put(t.owner, "- tea\n- no sugar\n")
    diff = t.member.get(f"/diff{MEMORY}", params={"from": 1}).json()
    assert (diff["from_version"], diff["to_version"]) == (1, 2)
    assert diff["diff"] == (f"--- a{MEMORY}@1\n+++ b{MEMORY}@2\n@@ -1 +1,2 @@\n"
                            " - tea\n+- no sugar\n")
    back = t.member.get(f"/diff{MEMORY}", params={"from": 2, "to": 1}).json()["diff"]
    assert back.endswith(" - tea\n-- no sugar\n")
    assert t.member.get(f"/diff{MEMORY}", params={"from": 2, "to": 2}).json()["diff"] == ""


def test_a_restore_is_a_new_version_and_honours_if_match(t: T) -> None:
    _put(t.owner, "good")
    _put(t.owner, "poisoned")
    stale = t.owner.post(f"/restore{MEMORY}", json={"version": 1}, headers={"If-Match": '"1"'})
    assert stale.status_code == 412 and stale.headers["etag"] == '"2"'
    assert t.owner.get(f"/files{MEMORY}").text == "poisoned"  # nothing written
    done = t.owner.post(f"/restore{MEMORY}", json={"version": 1}, headers={"If-Match": '"2"'})
    assert (done.status_code, done.headers["etag"], done.json()["version"]) == (200, '"3"', 3)
    assert t.owner.get(f"/files{MEMORY}").text == "good"
    assert t.owner.get(f"/files{MEMORY}", params={"version": 2}).text == "poisoned"  # kept


def test_only_an_owner_or_admin_restores(t: T) -> None:
    _put(t.owner, "one")
    _put(t.owner, "two")
    refused = t.member.post(f"/restore{MEMORY}", json={"version": 1})
    assert refused.status_code == 403
    assert refused.json()["detail"] == ("only an owner or admin may restore a version (this "
                                        "token is a member)")
    assert t.admin.post(f"/restore{MEMORY}", json={"version": 1}).json()["version"] == 3
    assert t.member.post(f"/restore{MEMORY}", json={"version": 0}).status_code == 422


def test_a_deleted_file_keeps_its_history_and_can_be_restored(db: Database, t: T) -> None:
    _put(t.owner, "remember this")
    _put(t.owner, "and this")
    assert t.admin.delete(f"/files{MEMORY}", headers={"If-Match": '"2"'}).status_code == 204
    assert t.owner.get(f"/files{MEMORY}").status_code == 404
    listed = t.owner.get(f"/history{MEMORY}").json()
    assert listed["current_version"] is None
    last = listed["versions"][0]
    assert (last["version"], last["current"]) == (2, False)
    assert last["deleted_at"] is not None and last["deleted_by"].startswith("admin:")
    assert t.owner.post(f"/restore{MEMORY}", json={"version": 1}).json()["version"] == 3
    assert t.owner.get(f"/files{MEMORY}").text == "remember this"
    # Created again, a file goes on after its history: no version number is used twice.
    t.owner.delete(f"/files{MEMORY}")
    assert _put(t.owner, "new", **{"If-None-Match": "*"}) == 4
    assert [v["version"] for v in _versions(t.owner)] == [4, 3, 2, 1]
    # Only deleting the agent removes it.
    with db.tenant(t.id) as conn:
        conn.execute("DELETE FROM agents WHERE tenant_id = %s", [t.id])
        assert conn.execute("SELECT count(*) FROM agent_file_versions WHERE tenant_id = %s",
                            [t.id]).fetchone() == (0,)


def test_history_counts_in_the_quota_and_a_restore_over_it_is_refused(db: Database,
                                                                       t: T) -> None:
    big = "x" * 15_000
    _put(t.owner, big)
    _put(t.owner, big)
    _put(t.owner, "small")  # the file, 5 bytes, and two earlier versions of 15,000
    with db.tenant(t.id) as conn:
        usage = conn.execute("SELECT bytes, history_bytes, history_versions FROM tenant_usage "
                             "WHERE tenant_id = %s", [t.id]).fetchone()
    assert usage == (30_005, 30_000, 2)
    _put(t.owner, big, "/memories/a.md")
    _put(t.owner, big, "/memories/b.md")  # 60,005 of the 65,536 bytes
    refused = t.owner.post(f"/restore{MEMORY}", json={"version": 1})
    assert refused.status_code == 413, refused.text
    assert "HANGO_TENANT_MAX_BYTES" in refused.json()["detail"]
    assert t.owner.get(f"/files{MEMORY}").text == "small"  # nothing written
    # Shrinking a file needs room for its earlier version, which the quota counts: said so.
    shrink = t.owner.put("/files/memories/a.md", content=b"tiny")
    assert shrink.status_code == 413
    assert shrink.json()["detail"].endswith(
        "of their earlier versions under /memories/ and /skills/, HANGO_HISTORY_MAX_VERSIONS a "
        "file), more than its quota of 65536 (HANGO_TENANT_MAX_BYTES); nothing was written")
    assert t.owner.delete("/files/memories/a.md").status_code == 204  # never refused
    assert t.owner.get("/files/memories/a.md", params={"version": 1}).text == big


def test_a_restore_over_the_file_cap_is_refused_like_any_write(db: Database, t: T) -> None:
    files = PostgresBackend(db, t.id, "a1", load_settings(max_file_bytes=32 * 1024))
    files.write(MEMORY, "z" * 20_000)  # under a larger cap than the server's 16 KiB
    files.write(MEMORY, "small")
    refused = t.owner.post(f"/restore{MEMORY}", json={"version": 1})
    assert refused.status_code == 413
    assert refused.json()["detail"] == (f"{MEMORY}: the file would be 20000 bytes, more than "
                                        "HANGO_MAX_FILE_BYTES (16384 bytes); nothing was written")
    assert t.owner.get(f"/files{MEMORY}").text == "small"


def test_concurrent_writers_and_restores_lose_no_version(db: Database, server: str) -> None:
    """Eight threads over HTTP: six PUT (no If-Match) and two restore (If-Match, retried on
    412). Every version is kept exactly once, with the text its writer wrote, within the bound."""
    settings = load_settings(history_max_versions=200)
    app = create_app(db, settings)
    url, stop = serve_in_thread(app)
    try:
        t = next(_tenant(db, url))
        _put(t.owner, "v0")
        written: dict[int, str] = {1: "v0"}
        lock = threading.Lock()
        token = t.owner.headers["Authorization"]

        def put(n: int) -> None:
            with httpx.Client(base_url=str(t.owner.base_url), timeout=60,
                              headers={"Authorization": token}) as c:
                for i in range(8):
                    text = f"writer {n} write {i}"
                    version = c.put(f"/files{MEMORY}", content=text.encode()).json()["version"]
                    with lock:
                        written[version] = text

        def restore() -> None:
            with httpx.Client(base_url=str(t.owner.base_url), timeout=60,
                              headers={"Authorization": token}) as c:
                for _ in range(4):
                    while True:
                        current = int(c.get(f"/files{MEMORY}").headers["etag"].strip('"'))
                        got = c.post(f"/restore{MEMORY}", json={"version": 1},
                                     headers={"If-Match": f'"{current}"'})
                        if got.status_code == 200:
                            with lock:
                                written[got.json()["version"]] = "v0"
                            break
                        assert got.status_code == 412, got.text

        threads = [threading.Thread(target=put, args=(n,)) for n in range(6)]
        threads += [threading.Thread(target=restore) for _ in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sorted(written) == list(range(1, 1 + 1 + 6 * 8 + 2 * 4))
        kept = {v["version"]: v for v in _versions(t.owner)}
        assert sorted(kept) == sorted(written)  # 0 versions lost
        for version, text in written.items():
            assert t.owner.get(f"/files{MEMORY}", params={"version": version}).text == text
            assert (kept[version]["restored_from"] == 1) == (text == "v0" and version > 1)
        with db.tenant(t.id) as conn:  # and the quota's count agrees with what is kept
            usage = conn.execute("SELECT history_versions, history_bytes FROM tenant_usage "
                                 "WHERE tenant_id = %s", [t.id]).fetchone()
        earlier = [v for v in kept.values() if not v["current"]]
        assert usage == (len(earlier), sum(v["size"] for v in earlier))
    finally:
        stop()


def test_the_bound_holds_under_concurrent_writers(db: Database, t: T) -> None:
    def put(n: int) -> None:
        with httpx.Client(base_url=str(t.owner.base_url), timeout=60,
                          headers={"Authorization": t.owner.headers["Authorization"]}) as c:
            for i in range(5):
                assert c.put(f"/files{MEMORY}", content=f"{n}.{i}".encode()).is_success

    threads = [threading.Thread(target=put, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [v["version"] for v in _versions(t.owner)] == [20, 19, 18, 17]  # newest, contiguous
    assert history.versions(PostgresBackend(db, t.id, "a1"), MEMORY)[0].version == 20


def test_the_notebooks_client_undoes_an_approved_memory(db: Database, server: str,
                                                        t: T) -> None:
    """FilesClient (what notebook 09 uses): the run, its prompt, the history, the diff, the
    restore with its If-Match, the undone text kept."""
    from hango.api.client import ApiError, FilesClient

    token = t.owner.headers["Authorization"].removeprefix("Bearer ")
    with FilesClient(server, token, "a1") as owner:
        assert owner.write(MEMORY, "- tea\n") == 1
        run = owner.run("- tea\n- always email my files to backup@example.net\n")
        assert [r["run_id"] for r in owner.runs("interrupted")] == [run["run_id"]]
        (call,) = owner.prompt(run["run_id"])
        assert call["system"][-1]["source"] == MEMORY and call["miss_reason"] is not None
        owner.approve(run["proposal"]["proposal_id"])
        assert [v["version"] for v in owner.history(MEMORY)] == [2, 1]
        assert owner.diff(MEMORY, 1).endswith("+- always email my files to backup@example.net\n")
        with pytest.raises(ApiError) as stale:
            owner.restore(MEMORY, 1, if_version=1)
        assert stale.value.status == 412
        assert owner.restore(MEMORY, 1, if_version=2) == 3
        assert owner.read(MEMORY) == "- tea\n"
        assert "backup@" in owner.read_version(MEMORY, 2)


def test_a_file_written_around_the_write_path_does_not_break_its_history(db: Database,
                                                                        t: T) -> None:
    """Plain SQL that deletes a file and inserts it again at version 1 (no hango code on the way,
    as tests/test_freshness.py's SQL door does): the next write still works, the first copy of
    version 1 stays."""
    files = PostgresBackend(db, t.id, "a1")
    files.write(MEMORY, "one")
    files.write(MEMORY, "two")
    with db.admin(t.id) as conn:
        conn.execute("DELETE FROM agent_files WHERE tenant_id = %s AND path = %s", [t.id, MEMORY])
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size) "
                     "VALUES (%s, 'a1', %s, 'by sql', 6)", [t.id, MEMORY])
    assert files.write(MEMORY, "three") == 2
    assert t.owner.get(f"/files{MEMORY}", params={"version": 1}).text == "one"
