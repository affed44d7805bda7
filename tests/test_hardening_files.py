"""No door amplifies a file, listings are bounded, tenants have
quotas, and a file and a directory never share a name.

Every door is tried: the backend, the files API over real HTTP, the client, and the agent's
tools in real runs. The races are made deterministic: one transaction holds its write open, the
test sees the other writer *waiting* in ``pg_stat_activity``, and only then commits, so the
check that is being tested is the one in the database, not a lucky interleaving.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict

from hango.agent import tools
from hango.agent.hooks import RunContext
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.api.client import FilesClient
from hango.db import Database
from hango.fs.backend import (
    FileNotFound,
    FileTooLarge,
    InvalidCursor,
    PathConflict,
    PostgresBackend,
    QuotaExceeded,
)
from hango.models.simulated import SimulatedModel, tool_call
from hango.settings import load_settings
from hango.telemetry import Telemetry

MIB = 1024 * 1024
CAP = 1024  # the small servers' HANGO_MAX_FILE_BYTES


@dataclass
class Api:
    url: str
    tenant: str
    owner: str


def _api(db: Database, url: str) -> Api:
    tenant = create_tenant(db, "hard-" + uuid.uuid4().hex[:12])
    save_agent(db, tenant, "a1", AgentConfig())
    return Api(url, tenant, create_token(db, tenant, "owner"))


@pytest.fixture
def api(db: Database, api_url: str) -> Api:
    """The default settings (HANGO_MAX_FILE_BYTES 16 MiB, body 1 MiB): the session's server."""
    return _api(db, api_url)


@pytest.fixture
def small(db: Database) -> Iterator[Api]:
    """A 1 KiB file cap under a 64 KiB body limit, pages of 3 (at most 5), quotas of 6 files
    and 4 KiB, and a glob that examines at most 10 paths a page: a server of its own, as these
    settings are the app's."""
    url, stop = serve_in_thread(create_app(db, load_settings(
        max_file_bytes=CAP, max_body_bytes=64 * 1024, list_page_default=3, list_page_max=5,
        glob_scan_max=10, tenant_max_files=6, tenant_max_bytes=4096)))
    try:
        yield _api(db, url)
    finally:
        stop()


def http(api: Api) -> httpx.Client:
    return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {api.owner}"},
                        timeout=60)


def ctx_for(backend: PostgresBackend) -> RunContext:
    config = AgentConfig()
    return RunContext(backend.tenant_id, backend.agent_id, config, backend, "hard",
                      frozenset(config.tools), Telemetry())


def version(db: Database, tenant: str, path: str) -> int | None:
    try:
        return PostgresBackend(db, tenant, "a1").read(path, limit=0).version
    except FileNotFound:
        return None


# --- finding 1: one file-size cap through every door -------------------------------------------


def test_patch_cannot_amplify_a_file(api: Api, db: Database) -> None:
    """The issue's attack: 1 MiB of 'a', then replace every 'a' by 32 characters (32 MiB), and a
    65 KB PATCH asking for a 64 GiB result. Both are 413 naming the cap and the size; nothing
    is written; never a 500."""
    url = "/v1/agents/a1/files/notes/a.txt"
    with http(api) as c:
        assert c.put(url, content=b"a" * MIB).status_code == 201
        grow = c.patch(url, json={"old": "a", "new": "b" * 32, "replace_all": True})
        assert grow.status_code == 413, grow.text
        detail = grow.json()["detail"]
        assert "HANGO_MAX_FILE_BYTES (16777216 bytes)" in detail
        assert f"would be {32 * MIB} bytes" in detail and "nothing was written" in detail
        huge = c.patch(url, json={"old": "a", "new": "c" * 65_000, "replace_all": True})
        assert huge.status_code == 413, huge.text
        assert f"would be {MIB * 65_000} bytes" in huge.json()["detail"]  # ~64 GiB, not built
        got = c.get(url)
        assert got.status_code == 200 and got.headers["ETag"] == '"1"'
        assert got.content == b"a" * MIB


def test_every_api_door_keeps_to_the_cap(small: Api, db: Database) -> None:
    with http(small) as c:
        fits = c.put("/v1/agents/a1/files/notes/fits", content=b"x" * (CAP - 10) + b"MARKER0123")
        assert fits.status_code == 201
        over = c.put("/v1/agents/a1/files/notes/over", content=b"x" * (CAP + 1))
        assert over.status_code == 413
        assert over.json()["detail"] == (
            "/notes/over: the file would be 1025 bytes, more than HANGO_MAX_FILE_BYTES "
            "(1024 bytes); nothing was written")

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(4):
                yield b"y" * 300

        chunked = c.put("/v1/agents/a1/files/notes/chunked", content=chunks())
        assert chunked.status_code == 413
        assert "at least 1200 bytes" in chunked.json()["detail"]
        # a single replacement (no replace_all) that grows past the cap
        one = c.patch("/v1/agents/a1/files/notes/fits", json={"old": "MARKER0123", "new": "z" * 20})
        assert one.status_code == 413 and "would be 1034 bytes" in one.json()["detail"]
        # shrinking or keeping the size is fine
        same = c.patch("/v1/agents/a1/files/notes/fits", json={"old": "MARKER0123",
                                                               "new": "q" * 10})
        assert same.status_code == 200
    assert version(db, small.tenant, "/notes/over") is None
    assert version(db, small.tenant, "/notes/chunked") is None
    assert version(db, small.tenant, "/notes/fits") == 2


def test_a_file_stored_before_the_cap_is_not_served_whole(small: Api, db: Database) -> None:
    """GET cannot return more than the cap either: a file stored before it (here by SQL) is 409
    naming the cap; at most the cap's bytes are read to find out; it can still be replaced,
    shrunk or deleted."""
    with db.admin() as conn:
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                     " VALUES (%s, 'a1', '/old/big', %s, 5000)", [small.tenant, b"o" * 5000])
    with http(small) as c:
        got = c.get("/v1/agents/a1/files/old/big")
        assert got.status_code == 409
        assert got.json()["detail"].startswith(
            "/old/big: the file is 5000 bytes, more than HANGO_MAX_FILE_BYTES (1024 bytes)")
        grow = c.patch("/v1/agents/a1/files/old/big", json={"old": "o", "new": "oo"})
        assert grow.status_code == 413 and "at least 5000 bytes" in grow.json()["detail"]
        assert c.delete("/v1/agents/a1/files/old/big").status_code == 204
    backend = PostgresBackend(db, small.tenant, "a1", load_settings(max_file_bytes=CAP))
    backend.write("/old/fine", "f")
    with db.admin() as conn:
        conn.execute("UPDATE agent_files SET content = %s, size = 5000 WHERE tenant_id = %s"
                     " AND path = '/old/fine'", [b"p" * 5000, small.tenant])
    backend.bytes_read = 0
    with pytest.raises(FileTooLarge, match="is 5000 bytes"):
        backend.read("/old/fine")
    assert backend.bytes_read <= CAP
    assert backend.read("/old/fine", limit=10).content == "p" * 10  # a head is always readable


def test_the_backend_refuses_before_building(db: Database, backend: PostgresBackend) -> None:
    small = PostgresBackend(db, backend.tenant_id, "a1", load_settings(max_file_bytes=CAP))
    with pytest.raises(FileTooLarge, match=r"would be 1025 bytes.*\(1024 bytes\)"):
        small.write("/n/x", "x" * (CAP + 1))
    with pytest.raises(FileTooLarge, match="would be 1026 bytes"):
        small.write("/n/x", "é" * 513)  # 513 characters, 1026 bytes
    with pytest.raises(FileTooLarge, match="at least 4097 bytes"):
        small.write("/n/x", "x" * 4097)  # over 4 x the cap in characters: never even encoded
    with pytest.raises(FileNotFound):
        small.read("/n/x")
    small.write("/n/x", "ab" * 512)
    with pytest.raises(FileTooLarge, match=f"would be {1024 + 512 * 1023} bytes"):
        small.edit("/n/x", "a", "A" * 1024, replace_all=True)
    # the 64 GiB edit, at the default cap: refused from arithmetic, not MemoryError
    backend.write("/n/big", "a" * MIB)
    with pytest.raises(FileTooLarge, match=f"would be {MIB * 65_000} bytes"):
        backend.edit("/n/big", "a", "c" * 65_000, replace_all=True)
    assert small.read("/n/x").version == 1 and backend.read("/n/big").version == 1


def test_the_agent_tools_keep_to_the_cap(db: Database, backend: PostgresBackend) -> None:
    backend.write("/notes/a.txt", "a" * MIB)
    model = SimulatedModel(policy=[
        [tool_call("edit_file", {"path": "/notes/a.txt", "old_string": "a",
                                 "new_string": "b" * 32, "replace_all": True}),
         tool_call("write_file", {"path": "/notes/b.txt", "content": "x" * (16 * MIB + 1)})],
        "done",
    ])
    result = Agent(db, backend.tenant_id, "a1", model).run("grow it")
    edit, write = (r for m in result.messages for r in m.tool_results)
    assert edit.is_error and write.is_error
    assert f"would be {32 * MIB} bytes, more than HANGO_MAX_FILE_BYTES (16777216" in edit.content
    assert "would be 16777217 bytes" in write.content
    assert backend.read("/notes/a.txt").version == 1
    with pytest.raises(FileNotFound):
        backend.read("/notes/b.txt")


# --- finding 6: a file and a directory never share a name --------------------------------------


def test_a_file_and_a_directory_never_share_a_name(db: Database, backend: PostgresBackend) -> None:
    backend.write("/notes/x", "x")
    with pytest.raises(PathConflict, match=r"/notes/ is a directory \(it holds /notes/x\)") as e:
        backend.write("/notes", "file")
    assert (e.value.path, e.value.other) == ("/notes", "/notes/x")
    backend.write("/f", "a file")
    for path in ("/f/y", "/f/y/z/w"):
        with pytest.raises(PathConflict, match="/f is a file, so it cannot also be a directory"):
            backend.write(path, "x")
    backend.write("/f-2", "neighbours are fine")  # '-' and '0' sort around '/': no false hit
    backend.write("/f0/x", "so is this")
    assert [(e.path, e.is_dir) for e in backend.ls("/")] == [
        ("/f", False), ("/f-2", False), ("/f0/", True), ("/notes/", True)]
    with pytest.raises(FileNotFound):
        backend.read("/notes")


def test_the_conflict_through_the_api_and_the_tools(api: Api, db: Database) -> None:
    with http(api) as c:
        assert c.put("/v1/agents/a1/files/notes/x", content=b"x").status_code == 201
        clash = c.put("/v1/agents/a1/files/notes", content=b"file")
        assert clash.status_code == 409
        assert "/notes/ is a directory (it holds /notes/x)" in clash.json()["detail"]
        assert c.put("/v1/agents/a1/files/f", content=b"f").status_code == 201
        under = c.put("/v1/agents/a1/files/f/y", content=b"y")
        assert under.status_code == 409 and "/f is a file" in under.json()["detail"]
    model = SimulatedModel(policy=[
        [tool_call("write_file", {"path": "/notes", "content": "file"}),
         tool_call("write_file", {"path": "/f/z", "content": "z"})], "done"])
    result = Agent(db, api.tenant, "a1", model).run("try")
    results = [r for m in result.messages for r in m.tool_results]
    assert [r.is_error for r in results] == [True, True]
    assert "may not share a name" in results[0].content and "/f is a file" in results[1].content


def _waiting(db: Database, query_like: str, done: threading.Event) -> bool:
    """True once a session of the app role waits on a lock running ``query_like``."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not done.is_set():
        with db.admin() as conn:  # the app's sessions log in as hango_app, or as the URL's role
            row = conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND usename IN ('hango_app', %s) AND query LIKE %s",
                [conninfo_to_dict(db.app_conninfo).get("user"), query_like]).fetchone()
        if row:
            return True
        time.sleep(0.02)
    return False


def _race(db: Database, tenant: str, hold: Callable[[Any], None], write: Callable[[], None],
          query_like: str) -> BaseException | None:
    """Run ``hold`` in an open transaction; start ``write`` in a thread; commit only once the
    writer is seen waiting. Returns what the writer raised (None: it succeeded)."""
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def writer() -> None:
        try:
            write()
            outcome.append(None)
        except BaseException as exc:  # handed back to the test
            outcome.append(exc)
        done.set()

    with db.tenant(tenant) as conn:
        hold(conn)
        thread = threading.Thread(target=writer)
        thread.start()
        waited = _waiting(db, query_like, done)
    thread.join(30)
    assert waited, "the second writer never waited for the first: nothing serialises them"
    return outcome[0]


def test_racing_file_and_directory_writers_cannot_both_win(
        db: Database, backend: PostgresBackend) -> None:
    """One transaction writes /race/x and keeps it open; the other writes /race. A check in
    Python (or an unlocked trigger) sees nothing and both commit; the database's lock makes the
    second wait, then refuse."""
    def hold(conn: Any) -> None:
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                     " VALUES (%s, 'a1', '/race/x', 'x', 1)", [backend.tenant_id])

    raised = _race(db, backend.tenant_id, hold, lambda: backend.write("/race", "file"),
                   "%INSERT INTO agent_files%")
    assert isinstance(raised, PathConflict), raised
    assert [e.path for e in backend.ls("/")] == ["/race/"]


def test_many_racing_writers_never_both_win(db: Database, backend: PostgresBackend) -> None:
    rounds, both = 30, 0
    for i in range(rounds):
        barrier = threading.Barrier(2)
        won: list[str] = []

        def write(path: str, barrier: threading.Barrier = barrier,
                  won: list[str] = won) -> None:
            barrier.wait()
            try:
                backend.write(path, "x")
                won.append(path)
            except PathConflict:
                pass

        threads = [threading.Thread(target=write, args=(p,)) for p in (f"/r{i}", f"/r{i}/x")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        both += len(won) == 2
        assert len(won) == 1, won
    assert both == 0


# --- finding 3: bounded listings -----------------------------------------------------------------


def _bulk(db: Database, tenant: str, fmt: str, n: int, agent: str = "a1") -> None:
    """``n`` one-byte files named ``fmt % i``, made by the database in one statement."""
    with db.admin() as conn:
        conn.execute(
            "INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
            " SELECT %s, %s, format(%s, lpad(i::text, 6, '0')), 'x', 1"
            "   FROM generate_series(1, %s) AS i", [tenant, agent, fmt, n])


class _Explaining:
    """Runs each of the backend's statements under EXPLAIN (ANALYZE, BUFFERS) first, with the
    backend's own SQL and parameters, as the app role with the tenant set."""

    def __init__(self, db: Database) -> None:
        self.db, self.plans = db, []  # type: list[Any]

    def tenant(self, tenant_id: str) -> Any:
        outer = self

        class Conn:
            def __init__(self, conn: Any) -> None:
                self.conn = conn

            def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
                plan = self.conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query,
                                         params).fetchone()[0]
                outer.plans.append(plan)
                return self.conn.execute(query, params, **kw)

        class Ctx:
            def __enter__(self) -> Conn:
                self.cm = outer.db.tenant(tenant_id)
                return Conn(self.cm.__enter__())

            def __exit__(self, *exc: Any) -> None:
                self.cm.__exit__(*exc)

        return Ctx()


def blocks_touched(db: Database, backend: PostgresBackend,
                   call: Callable[[PostgresBackend], Any]) -> int:
    explaining = _Explaining(db)
    call(PostgresBackend(explaining, backend.tenant_id, backend.agent_id,  # type: ignore[arg-type]
                         backend.settings))
    node = explaining.plans[0][0]["Plan"]  # the top node's counts include its children's
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])


def _pages(fetch: Callable[[str | None], Any]) -> list[list[Any]]:
    pages, cursor = [], None
    while True:
        page = fetch(cursor)
        pages.append(list(page))
        if (cursor := page.next_cursor) is None:
            return pages


def test_ls_pages_are_keyset_and_cost_what_a_page_costs(
        db: Database, backend: PostgresBackend) -> None:
    for path in ("/d/a.md", "/d/b/1", "/d/b/2", "/d/b-c", "/d/c.md", "/d/z/deep/er", "/e"):
        backend.write(path, "x")
    _bulk(db, backend.tenant_id, "/d/b/%s", 20_000)  # one subdirectory with 20,002 files
    pages = _pages(lambda cursor: backend.ls("/d/", limit=2, cursor=cursor))
    assert [[e.path for e in p] for p in pages] == [
        ["/d/a.md", "/d/b-c"], ["/d/b/", "/d/c.md"], ["/d/z/"]]
    # A page jumps over /d/b/'s 20,002 files: a few index probes (16 buffers when measured),
    # not a scan (the old GROUP BY, cut to a page afterwards, touched 131 at 5,002 files).
    assert blocks_touched(db, backend, lambda b: b.ls("/d/", limit=3)) < 60
    with pytest.raises(InvalidCursor, match="another listing"):
        backend.ls("/e/", cursor=backend.ls("/d/", limit=1).next_cursor)
    with pytest.raises(InvalidCursor, match="invalid cursor"):
        backend.ls("/d/", cursor="not-a-cursor")
    with pytest.raises(ValueError, match="limit must be a positive"):
        backend.ls("/d/", limit=0)


def test_page_size_has_a_default_and_a_maximum(db: Database, backend: PostgresBackend) -> None:
    _bulk(db, backend.tenant_id, "/many/%s", 30)
    small = PostgresBackend(db, backend.tenant_id, "a1",
                            load_settings(list_page_default=4, list_page_max=10))
    assert len(small.ls("/many/")) == 4 and len(small.glob("/many/*")) == 4
    assert len(small.ls("/many/", limit=1000)) == 10  # reduced to HANGO_LIST_PAGE_MAX
    assert sum(map(len, _pages(lambda c: small.ls("/many/", limit=7, cursor=c)))) == 30
    assert sum(map(len, _pages(lambda c: small.glob("/many/*", limit=7, cursor=c)))) == 30


def test_glob_pages_and_its_scan_budget(db: Database, backend: PostgresBackend) -> None:
    _bulk(db, backend.tenant_id, "/g/n%s.txt", 95)
    for path in ("/g/a.md", "/g/zz.md", "/g/sub/b.md"):
        backend.write(path, "x")
    budget = PostgresBackend(db, backend.tenant_id, "a1", load_settings(glob_scan_max=10))
    pages = _pages(lambda cursor: budget.glob("/g/*.md", limit=5, cursor=cursor))
    assert [p for page in pages for p in page] == ["/g/a.md", "/g/zz.md"]
    # 98 paths under /g/, 10 examined a page: short (even empty) pages, each with a cursor
    assert len(pages) == 10 and [] in pages
    assert backend.glob("/g/**/*.md") == ["/g/a.md", "/g/sub/b.md", "/g/zz.md"]


def test_api_and_client_pagination(small: Api, db: Database) -> None:
    backend = PostgresBackend(db, small.tenant, "a1")
    for path in ("/p/1", "/p/2", "/p/3", "/p/4/x", "/p/5"):
        backend.write(path, "x")
    with http(small) as c:
        first = c.get("/v1/agents/a1/files", params={"dir": "/p/"}).json()
        assert [e["path"] for e in first["entries"]] == ["/p/1", "/p/2", "/p/3"]  # default 3
        rest = c.get("/v1/agents/a1/files",
                     params={"dir": "/p/", "cursor": first["next_cursor"], "limit": 100}).json()
        assert [e["path"] for e in rest["entries"]] == ["/p/4/", "/p/5"]
        assert rest["next_cursor"] is None
        for params, rule in (({"dir": "/p/", "cursor": "garbage"}, "invalid cursor"),
                             ({"glob": "/p/*", "cursor": first["next_cursor"]}, "another listing"),
                             ({"dir": "/p/", "limit": 0}, "limit (query)")):
            bad = c.get("/v1/agents/a1/files", params=params)
            assert bad.status_code == 422 and rule in bad.json()["detail"], bad.text
    client = FilesClient(small.url, small.owner, "a1")
    page = client.ls("/p/", limit=2)
    assert [e.path for e in page] == ["/p/1", "/p/2"] and page.next_cursor is not None
    assert [e.path for e in client.iter_ls("/p/", limit=2)] == [
        "/p/1", "/p/2", "/p/3", "/p/4/", "/p/5"]
    assert list(client.iter_glob("/p/**", limit=2)) == ["/p/1", "/p/2", "/p/3", "/p/4/x", "/p/5"]
    client.close()


def test_the_agent_tools_cap_listings_and_say_how_to_narrow(
        db: Database, backend: PostgresBackend) -> None:
    _bulk(db, backend.tenant_id, "/big/f%s.md", tools.LIST_LIMIT + 50)
    ctx = ctx_for(backend)
    listing = tools.ls(ctx, {"path": "/big/"})
    lines = listing.splitlines()
    assert len(lines) == tools.LIST_LIMIT + 1
    assert lines[-1] == (f"[... {tools.LIST_LIMIT} shown and more exist: list a subdirectory, "
                         "or glob a narrower pattern such as /big/a*]")
    narrower = tools.ls(ctx, {"path": "/big"}).splitlines()
    assert narrower[-1].endswith("such as /big/a*]")
    found = tools.glob(ctx, {"pattern": "/big/*.md"}).splitlines()
    assert len(found) == tools.LIST_LIMIT + 1 and "narrow the pattern" in found[-1]
    assert "more exist" not in tools.glob(ctx, {"pattern": "/big/f0000*.md"})


# --- finding 3: per-tenant quotas, enforced by the database ---------------------------------------


def test_quotas_through_the_backend(db: Database, backend: PostgresBackend) -> None:
    quota = PostgresBackend(db, backend.tenant_id, "a1",
                            load_settings(tenant_max_files=3, tenant_max_bytes=100))
    for i in range(3):
        quota.write(f"/q/{i}", "x" * 10)
    with pytest.raises(QuotaExceeded, match=r"would have 4 files, more than its quota of 3 "
                                            r"\(HANGO_TENANT_MAX_FILES\)") as e:
        quota.write("/q/3", "x")
    assert e.value.quota == "HANGO_TENANT_MAX_FILES"
    quota.write("/q/0", "y" * 20)  # replacing a file adds no file
    with pytest.raises(QuotaExceeded, match=r"would hold 101 bytes.*HANGO_TENANT_MAX_BYTES"):
        quota.write("/q/1", "z" * 71)
    with pytest.raises(QuotaExceeded, match="HANGO_TENANT_MAX_BYTES"):
        quota.edit("/q/2", "x" * 10, "w" * 200)
    quota.delete("/q/2")
    quota.write("/q/3", "x")  # room again
    with db.admin() as conn:
        usage = conn.execute("SELECT files, bytes FROM tenant_usage WHERE tenant_id = %s",
                             [backend.tenant_id]).fetchone()
        real = conn.execute("SELECT count(*), sum(size) FROM agent_files WHERE tenant_id = %s",
                            [backend.tenant_id]).fetchone()
    assert usage == real == (3, 31)
    # a tenant over a quota lowered later can still shrink and delete
    lower = PostgresBackend(db, backend.tenant_id, "a1",
                            load_settings(tenant_max_files=1, tenant_max_bytes=10))
    lower.edit("/q/0", "y" * 20, "y")
    lower.delete("/q/1")


def test_quotas_through_the_api_and_the_tools(small: Api, db: Database) -> None:
    with http(small) as c:
        for i in range(6):
            assert c.put(f"/v1/agents/a1/files/n/{i}", content=b"x").status_code == 201
        full = c.put("/v1/agents/a1/files/n/6", content=b"x")
        assert full.status_code == 413
        assert "more than its quota of 6 (HANGO_TENANT_MAX_FILES)" in full.json()["detail"]
        for i in range(4):
            assert c.put(f"/v1/agents/a1/files/n/{i}", content=b"x" * 1000).status_code == 200
        heavy = c.patch("/v1/agents/a1/files/n/4", json={"old": "x", "new": "x" * 200})
        assert heavy.status_code == 413 and "HANGO_TENANT_MAX_BYTES" in heavy.json()["detail"]
    backend = PostgresBackend(db, small.tenant, "a1", load_settings(tenant_max_files=6))
    with pytest.raises(QuotaExceeded, match="HANGO_TENANT_MAX_FILES"):
        tools.write_file(ctx_for(backend), {"path": "/n/7", "content": "x"})


def test_racing_writers_cannot_overshoot_a_quota(db: Database, backend: PostgresBackend) -> None:
    """The first writer takes the tenant to its quota and keeps its transaction open; the second
    waits on the usage row, then sees the committed count and is refused."""
    quota = PostgresBackend(db, backend.tenant_id, "a1", load_settings(tenant_max_files=1))

    def hold(conn: Any) -> None:
        conn.execute("SELECT set_config('hango.tenant_max_files', '1', true)")
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                     " VALUES (%s, 'a1', '/first', 'x', 1)", [backend.tenant_id])

    raised = _race(db, backend.tenant_id, hold, lambda: quota.write("/second", "x"),
                   "%INSERT INTO agent_files%")
    assert isinstance(raised, QuotaExceeded), raised
    assert backend.glob("/*") == ["/first"]


def test_many_concurrent_writers_fill_a_quota_exactly(db: Database, tenant: str) -> None:
    for agent in ("a1", "a2"):  # the quota is the tenant's, across its agents
        save_agent(db, tenant, agent, AgentConfig())
    settings = load_settings(tenant_max_files=25)
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def writer(n: int) -> None:
        backend = PostgresBackend(db, tenant, f"a{1 + n % 2}", settings)
        barrier.wait()
        for i in range(10):
            try:
                backend.write(f"/w{n}/{i}", "x")
                results.append(True)
            except QuotaExceeded:
                results.append(False)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with db.admin() as conn:
        (files,) = conn.execute("SELECT count(*) FROM agent_files WHERE tenant_id = %s",
                                [tenant]).fetchone() or (0,)
    assert results.count(True) == files == 25
    assert results.count(False) == 35
