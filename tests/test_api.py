"""The files API over real HTTP: owner writes memory, member refused under reserved prefixes, another
tenant gets 404 (never 403, and never tenant A's `/memories/AGENTS.md`), 401s, invalid paths 422
naming the rule, `If-Match`, body limits, the client, and the full auth matrix (7 principals ×
every operation × memory, skill and ordinary paths).

The files API over real HTTP: uvicorn on loopback in a thread, the real database behind it.

No TestClient: requests go through a socket, so URL decoding, Content-Length and chunked bodies
are what a learner's curl would meet.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from hango.agents import AgentConfig, create_tenant, create_token, load_agent, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.api.client import ApiError, Entry, FilesClient
from hango.db import Database
from hango.fs.backend import FileNotFound, PostgresBackend
from hango.settings import load_settings

MEMORY, SKILL, NOTE = "/memories/AGENTS.md", "/skills/x/SKILL.md", "/notes/x.md"


@dataclass
class Tenant:
    id: str
    owner: str
    admin: str
    member: str


def _tenant(db: Database, *agents: str) -> Tenant:
    tid = create_tenant(db, "api-" + uuid.uuid4().hex[:12])
    for agent in agents:
        save_agent(db, tid, agent, AgentConfig())
    return Tenant(tid, *(create_token(db, tid, role) for role in ("owner", "admin", "member")))


@pytest.fixture
def a(db: Database) -> Tenant:
    return _tenant(db, "a1", "only-a")


@pytest.fixture
def b(db: Database) -> Tenant:
    return _tenant(db, "a1")


def http(api_url: str, token: str | None) -> httpx.Client:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=api_url, headers=headers, timeout=30)


def content(db: Database, tenant: str, path: str, agent: str = "a1") -> str | None:
    try:
        return PostgresBackend(db, tenant, agent).read(path).content
    except FileNotFound:
        return None


def raw_request(api_url: str, request: bytes) -> tuple[int, bytes]:
    """Send bytes as they are: no client library gets a chance to normalise the URL."""
    parts = urlsplit(api_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


# --- the basic story ---------------------------------------------------------------------------


def test_owner_writes_memory_and_reads_it_back(api_url: str, db: Database, a: Tenant) -> None:
    with http(api_url, a.owner) as c:
        put = c.put(f"/v1/agents/a1/files{MEMORY}", content="Answer in French.\n",
                    headers={"Content-Type": "text/plain; charset=utf-8"})
        assert put.status_code == 201
        assert put.json() == {"path": MEMORY, "version": 1} and put.headers["ETag"] == '"1"'
        got = c.get(f"/v1/agents/a1/files{MEMORY}")
        assert got.status_code == 200 and got.text == "Answer in French.\n"
        assert got.headers["ETag"] == '"1"'
        assert got.headers["Content-Type"] == "text/plain; charset=utf-8"
        again = c.put(f"/v1/agents/a1/files{MEMORY}", content="Réponds en français.")
        assert again.status_code == 200 and again.headers["ETag"] == '"2"'
    assert content(db, a.id, MEMORY) == "Réponds en français."


@pytest.mark.parametrize("path", [MEMORY, SKILL])
def test_member_may_not_write_reserved_prefixes(
    api_url: str, db: Database, a: Tenant, path: str
) -> None:
    PostgresBackend(db, a.id, "a1").write(path, "seed")
    prefix = "/" + path.split("/")[1] + "/"
    with http(api_url, a.member) as c:
        for response in (
            c.put(f"/v1/agents/a1/files{path}", content="overwritten"),
            c.patch(f"/v1/agents/a1/files{path}", json={"old": "seed", "new": "edited"}),
            c.delete(f"/v1/agents/a1/files{path}"),
        ):
            assert response.status_code == 403, response.text
            detail = response.json()["detail"]
            assert f"reserved prefix {prefix}" in detail and "only an owner or admin" in detail
        assert c.get(f"/v1/agents/a1/files{path}").text == "seed"  # members read everything
    assert content(db, a.id, path) == "seed"


def test_member_writes_elsewhere(api_url: str, db: Database, a: Tenant) -> None:
    with http(api_url, a.member) as c:
        assert c.put("/v1/agents/a1/files/notes/x", content="mine").status_code == 201
        assert c.patch("/v1/agents/a1/files/notes/x",
                       json={"old": "mine", "new": "ours"}).status_code == 200
    assert content(db, a.id, "/notes/x") == "ours"


def test_another_tenant_gets_404_never_403(
    api_url: str, db: Database, a: Tenant, b: Tenant
) -> None:
    PostgresBackend(db, a.id, "a1").write(MEMORY, "A's memory")
    PostgresBackend(db, b.id, "a1").write(MEMORY, "B's memory")
    with http(api_url, b.owner) as c:
        # the same agent id exists in both tenants: B sees its own, never A's
        assert c.get(f"/v1/agents/a1/files{MEMORY}").text == "B's memory"
        # an agent only A has is, for B, an agent that does not exist
        for response in (
            c.get(f"/v1/agents/only-a/files{MEMORY}"),
            c.put(f"/v1/agents/only-a/files{MEMORY}", content="x"),
            c.get("/v1/agents/only-a"),
            c.get("/v1/agents/only-a/files", params={"dir": "/"}),
        ):
            assert response.status_code == 404, response.text
            assert response.json()["detail"] == "no agent 'only-a' in this tenant"
        assert c.get("/v1/agents").json() == {"agents": ["a1"]}
    with http(api_url, b.member) as c:  # a member of B: still 404 on A's agent, not 403
        assert c.put(f"/v1/agents/only-a/files{MEMORY}", content="x").status_code == 404
    assert content(db, a.id, MEMORY) == "A's memory"


@pytest.mark.parametrize(
    ("authorization", "detail"),
    [(None, "missing Authorization header"),
     ("Bearer hango_not-a-real-token", "unknown bearer token"),
     ("Basic YWxpY2U6c2VjcmV0", "not 'Bearer <token>'"),
     ("Bearer", "not 'Bearer <token>'")],
)
def test_no_or_bad_token_is_401(api_url: str, authorization: str | None, detail: str) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = httpx.get(f"{api_url}/v1/agents/a1/files{MEMORY}", headers=headers)
    assert response.status_code == 401
    assert detail in response.json()["detail"]
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


# --- paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url_path", "rule"),
    [
        ("notes/%2e%2e/memories/AGENTS.md", "'..' segment"),
        ("notes/%2E%2E/memories/AGENTS.md", "'..' segment"),
        ("notes/%2e/x", "'.' segment"),
        ("%2e%2e", "'..' segment"),
        ("notes%2F..%2Fmemories%2FAGENTS.md", "encoded slash"),
        ("notes%2fx", "encoded slash"),
        ("%2Fmemories/AGENTS.md", "encoded slash"),
        ("/memories/AGENTS.md", "empty segment"),  # //memories/AGENTS.md
        ("notes//x", "empty segment"),
        ("notes/", "must not end with /"),
        ("", "must not end with /"),
        ("notes/a%00b", "U+0000"),
        ("notes/a%5Cb", "backslash"),
        ("notes/%5C..%5Cmemories", "backslash"),
        ("notes/a%0Ab", "U+000A"),
        ("mem%E2%80%8Bories/AGENTS.md", "U+200B"),
        ("notes/%E2%80%AEtxt.exe", "U+202E"),
        ("notes/%FF", "not UTF-8"),
        ("notes/" + "a" * 256, "longer than 255 bytes"),
    ],
)
def test_invalid_paths_are_422_naming_the_rule(
    api_url: str, db: Database, a: Tenant, url_path: str, rule: str
) -> None:
    PostgresBackend(db, a.id, "a1").write(MEMORY, "seed")
    url = f"{api_url}/v1/agents/a1/files/{url_path}"
    with http(api_url, a.owner) as c:
        for method in ("GET", "PUT", "DELETE"):
            response = c.request(method, url, content="x" if method == "PUT" else None)
            assert response.status_code == 422, (method, response.text)
            assert rule in response.json()["detail"]
            assert response.request.url.raw_path.startswith(b"/v1/agents/a1/files/")
    assert content(db, a.id, MEMORY) == "seed"


def test_literal_dot_segments_are_refused_not_resolved(
    api_url: str, db: Database, a: Tenant
) -> None:
    """httpx (like a browser) resolves ``..`` before sending; a raw client does not. The server
    must refuse the literal segment: resolving it is how a member's write reaches /memories/."""
    PostgresBackend(db, a.id, "a1").write(MEMORY, "seed")
    for target in (b"/v1/agents/a1/files/notes/../memories/AGENTS.md",
                   b"/v1/agents/a1/files/notes/./../memories/AGENTS.md"):
        status, body = raw_request(api_url, b"PUT " + target + b" HTTP/1.1\r\nHost: x\r\n"
                                   b"Authorization: Bearer " + a.member.encode() + b"\r\n"
                                   b"Content-Length: 5\r\nConnection: close\r\n\r\nowned")
        assert status == 422 and b"segment is not allowed" in body, body
    assert content(db, a.id, MEMORY) == "seed"


# --- versions ----------------------------------------------------------------------------------


def test_if_match(api_url: str, db: Database, a: Tenant) -> None:
    url = "/v1/agents/a1/files/notes/v.md"
    with http(api_url, a.owner) as c:
        assert c.put(url, content="one", headers={"If-None-Match": "*"}).status_code == 201
        stale = c.put(url, content="stale", headers={"If-None-Match": "*"})
        assert stale.status_code == 412 and "already exists" in stale.json()["detail"]
        assert c.put(url, content="two", headers={"If-Match": '"1"'}).headers["ETag"] == '"2"'
        for method, kwargs in (("PUT", {"content": "lost"}),
                               ("PATCH", {"json": {"old": "two", "new": "lost"}}),
                               ("DELETE", {})):
            response = c.request(method, url, headers={"If-Match": '"1"'}, **kwargs)
            assert response.status_code == 412, (method, response.text)
            assert "expected version 1, but it is at version 2" in response.json()["detail"]
            assert response.headers["ETag"] == '"2"'
        bad = c.put(url, content="x", headers={"If-Match": "2"})
        assert bad.status_code == 422 and "quoted version" in bad.json()["detail"]
        both = c.put(url, content="x", headers={"If-Match": '"2"', "If-None-Match": "*"})
        assert both.status_code == 422
        edited = c.patch(url, json={"old": "two", "new": "three"}, headers={"If-Match": '"2"'})
        assert edited.status_code == 200 and edited.json()["version"] == 3
        assert c.delete(url, headers={"If-Match": '"3"'}).status_code == 204
        assert c.get(url).status_code == 404
        assert c.put("/v1/agents/a1/files/notes/new", content="x",
                     headers={"If-Match": '"0"'}).status_code == 201
    assert content(db, a.id, "/notes/v.md") is None


# --- bodies ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_url(db: Database) -> Iterator[str]:
    """A server whose body limit is 1 KiB, to test the boundary to the byte."""
    url, stop = serve_in_thread(create_app(db, load_settings(max_body_bytes=1024)))
    yield url
    stop()


def test_body_limit_to_the_byte(small_url: str, db: Database, a: Tenant) -> None:
    with http(small_url, a.owner) as c:
        assert c.put("/v1/agents/a1/files/notes/fits", content=b"x" * 1024).status_code == 201
        over = c.put("/v1/agents/a1/files/notes/over", content=b"x" * 1025)
        assert over.status_code == 413
        assert "larger than 1024 bytes (HANGO_MAX_BODY_BYTES)" in over.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(5):
                yield b"y" * 300

        chunked = c.put("/v1/agents/a1/files/notes/chunked", content=chunks())
        assert chunked.request.headers.get("Transfer-Encoding") == "chunked"
        assert chunked.status_code == 413
        edit = c.patch("/v1/agents/a1/files/notes/fits", json={"old": "x", "new": "y" * 2000})
        assert edit.status_code == 413

        def json_chunks() -> Iterator[bytes]:
            yield b'{"old": "x", "new": "'
            yield b"y" * 2000
            yield b'"}'

        chunked_edit = c.patch("/v1/agents/a1/files/notes/fits", content=json_chunks(),
                               headers={"Content-Type": "application/json"})
        assert chunked_edit.status_code == 413, chunked_edit.text
        assert "HANGO_MAX_BODY_BYTES" in chunked_edit.json()["detail"]
        agent = c.put("/v1/agents/a1", json={"system_prompt": "z" * 2000})
        assert agent.status_code == 413
    assert content(db, a.id, "/notes/over") is None
    assert content(db, a.id, "/notes/chunked") is None
    assert content(db, a.id, "/notes/fits") == "x" * 1024
    assert load_agent(db, a.id, "a1") == AgentConfig()


def test_oversized_body_at_the_default_limit(api_url: str, db: Database, a: Tenant) -> None:
    with http(api_url, a.owner) as c:
        response = c.put("/v1/agents/a1/files/notes/big", content=b"x" * (8 * 1024 * 1024))
        assert response.status_code == 413
    assert content(db, a.id, "/notes/big") is None


def test_non_utf8_bodies_are_422(api_url: str, db: Database, a: Tenant) -> None:
    with http(api_url, a.owner) as c:
        text = c.put("/v1/agents/a1/files/notes/bin", content=b"ok \xff\xfe")
        assert text.status_code == 422 and "not UTF-8" in text.json()["detail"]
        assert "byte 3" in text.json()["detail"]
        js = c.put("/v1/agents/a1", content=b'{"system_prompt": "\xff"}',
                   headers={"Content-Type": "application/json"})
        assert js.status_code == 422 and "not UTF-8" in js.json()["detail"]
    assert content(db, a.id, "/notes/bin") is None


def test_empty_body_writes_an_empty_file(api_url: str, db: Database, a: Tenant) -> None:
    with http(api_url, a.owner) as c:
        assert c.put("/v1/agents/a1/files/notes/empty").status_code == 201
        assert c.get("/v1/agents/a1/files/notes/empty").text == ""


# --- edits and listings ------------------------------------------------------------------------


def test_edit_errors(api_url: str, db: Database, a: Tenant) -> None:
    PostgresBackend(db, a.id, "a1").write("/notes/e.md", "alpha beta alpha")
    url = "/v1/agents/a1/files/notes/e.md"
    with http(api_url, a.owner) as c:
        missing = c.patch(url, json={"old": "gamma", "new": "x"})
        assert missing.status_code == 409 and "not found" in missing.json()["detail"]
        twice = c.patch(url, json={"old": "alpha", "new": "x"})
        assert twice.status_code == 409 and "occurs 2 times" in twice.json()["detail"]
        empty = c.patch(url, json={"old": "", "new": "x"})
        assert empty.status_code == 422 and "old (body)" in empty.json()["detail"]
        extra = c.patch(url, json={"old": "beta", "new": "x", "typo": 1})
        assert extra.status_code == 422 and "typo (body)" in extra.json()["detail"]
        nofile = c.patch("/v1/agents/a1/files/notes/none", json={"old": "a", "new": "b"})
        assert nofile.status_code == 404 and "no such file" in nofile.json()["detail"]
        assert c.delete("/v1/agents/a1/files/notes/none").status_code == 404
        everywhere = c.patch(url, json={"old": "alpha", "new": "A", "replace_all": True})
        assert everywhere.status_code == 200
    assert content(db, a.id, "/notes/e.md") == "A beta A"


def test_ls_and_glob(api_url: str, db: Database, a: Tenant) -> None:
    backend = PostgresBackend(db, a.id, "a1")
    for path in ("/skills/one/SKILL.md", "/skills/two/deep/SKILL.md", "/notes/x"):
        backend.write(path, "x")
    with http(api_url, a.member) as c:
        root = c.get("/v1/agents/a1/files").json()["entries"]
        assert [(e["path"], e["is_dir"]) for e in root] == [("/notes/", True), ("/skills/", True)]
        notes = c.get("/v1/agents/a1/files", params={"dir": "/notes"}).json()["entries"]
        assert notes == [{"path": "/notes/x", "is_dir": False, "size": 1, "version": 1}]
        found = c.get("/v1/agents/a1/files", params={"glob": "/skills/**/SKILL.md"})
        assert [e["path"] for e in found.json()["entries"]] == [
            "/skills/one/SKILL.md", "/skills/two/deep/SKILL.md"]
        assert c.get("/v1/agents/a1/files", params={"dir": "/empty/"}).json() == {
            "entries": [], "next_cursor": None}
        for params, rule in (({"dir": "/a/../b"}, "'..' segment"),
                             ({"glob": "skills/*"}, "absolute"),
                             ({"glob": "/a\x00"}, "U+0000"),
                             ({"dir": "/", "glob": "/*"}, "not both")):
            response = c.get("/v1/agents/a1/files", params=params)
            assert response.status_code == 422 and rule in response.json()["detail"]


# --- agent config ------------------------------------------------------------------------------


def test_agent_config(api_url: str, db: Database, a: Tenant) -> None:
    config = {"tools": ["read_file", "ls"], "memory": ["/memories/AGENTS.md"],
              "skills": ["/skills/team"]}
    with http(api_url, a.admin) as c:
        created = c.put("/v1/agents/new-agent", json=config)
        assert created.status_code == 201
        assert created.json()["skills"] == ["/skills/team/"]
        assert c.put("/v1/agents/new-agent", json=config).status_code == 200
        assert c.get("/v1/agents/new-agent").json()["tools"] == ["read_file", "ls"]
        assert "new-agent" in c.get("/v1/agents").json()["agents"]
        for body, named in (
            ({"memory": ["/notes/AGENTS.md"]}, "memory[0] '/notes/AGENTS.md': must be under /memories/"),
            ({"memory": ["/memories/ok.md", "/memories/../x"]}, "memory[1] '/memories/../x'"),
            ({"skills": ["/memories/"]}, "skills[0] '/memories/': must be under /skills/"),
            ({"skills": ["skills/"]}, "must be absolute"),
            ({"tools": ["rm -rf"]}, "tools[0] 'rm -rf' is not a tool name"),
            ({"system_prompt": "a\x00b"}, "U+0000"),
            ({"colour": "blue"}, "colour (body): Extra inputs are not permitted"),
        ):
            response = c.put("/v1/agents/new-agent", json=body)
            assert response.status_code == 422, body
            assert named in response.json()["detail"], response.json()
        bad_id = c.get("/v1/agents/Bad_ID")
        assert bad_id.status_code == 422 and "agent_id (URL)" in bad_id.json()["detail"]
        assert c.get("/v1/agents/nobody").status_code == 404
    with http(api_url, a.member) as c:
        refused = c.put("/v1/agents/new-agent", json={})
        assert refused.status_code == 403 and "owner or admin" in refused.json()["detail"]
        assert c.get("/v1/agents/new-agent").status_code == 200
    saved = load_agent(db, a.id, "new-agent")
    assert saved is not None and saved.tools == ["read_file", "ls"]


# --- the document, methods, the database -------------------------------------------------------


def test_openapi_document(api_url: str) -> None:
    doc = httpx.get(f"{api_url}/openapi.json").json()
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    operations = [(p, m, op) for p, ops in doc["paths"].items() for m, op in ops.items()]
    # files API; /v1/tokens; runs and proposals (test_proposals); history, diff, restore;
    # runs listed and a run's prompt; the tenant's defaults; a seat's checks (test_room)
    assert len(operations) == 8 + 3 + 8 + 3 + 2 + 2 + 2
    for path, method, op in operations:
        responses = op["responses"]
        for code in ("401", "422", "503"):
            schema = responses[code]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (path, method, code)
        assert "HTTPValidationError" not in str(op)
    file_ops = doc["paths"]["/v1/agents/{agent_id}/files/{path}"]
    assert list(file_ops["get"]["responses"]["200"]["content"]) == ["text/plain"]
    assert "ETag" in file_ops["put"]["responses"]["201"]["headers"]
    assert set(file_ops["put"]["responses"]) >= {"200", "201", "403", "404", "412", "413"}


def test_405_allows_every_method_of_the_path(api_url: str, a: Tenant) -> None:
    with http(api_url, a.owner) as c:
        response = c.request("POST", f"/v1/agents/a1/files{NOTE}")
        assert response.status_code == 405
        assert response.headers["Allow"] == "DELETE, GET, HEAD, PATCH, PUT"
        assert c.request("DELETE", "/v1/agents/a1").headers["Allow"] == "GET, HEAD, PUT"
        head = c.head("/v1/agents/a1/runs/x/resume")  # POST-only: HEAD is named as asked
        assert (head.status_code, head.headers["Allow"]) == (405, "POST")
        assert c.post("/v1/agents/a1/runs/x").headers["Allow"] == "GET, HEAD"


# Every GET route, with a URL to ask it (an unknown run or proposal: its 404 is compared too).
GET_URLS = {
    "/v1/agents": ["/v1/agents"],
    "/v1/agents/{agent_id}": ["/v1/agents/a1", "/v1/agents/nobody"],
    "/v1/tokens": ["/v1/tokens"],
    "/v1/agents/{agent_id}/files": ["/v1/agents/a1/files?dir=/notes/", "/v1/agents/a1/files"],
    "/v1/agents/{agent_id}/files/{path}": [f"/v1/agents/a1/files{NOTE}",
                                           "/v1/agents/a1/files/notes/missing.md",
                                           "/v1/agents/a1/files/a%2Fb"],
    "/v1/agents/{agent_id}/runs/{run_id}": ["/v1/agents/a1/runs/nope"],
    "/v1/agents/{agent_id}/runs": ["/v1/agents/a1/runs", "/v1/agents/nobody/runs?status=done"],
    "/v1/agents/{agent_id}/runs/{run_id}/prompt": ["/v1/agents/a1/runs/nope/prompt"],
    "/v1/agents/{agent_id}/history/{path}": [f"/v1/agents/a1/history{NOTE}",
                                             "/v1/agents/a1/history/memories/none.md"],
    "/v1/agents/{agent_id}/diff/{path}": [f"/v1/agents/a1/diff{NOTE}?from=1",
                                          f"/v1/agents/a1/diff{NOTE}?from=7"],
    "/v1/tenant/defaults": ["/v1/tenant/defaults"],
    "/v1/agents/{agent_id}/proposals": ["/v1/agents/a1/proposals?status=all"],
    "/v1/agents/{agent_id}/proposals/{proposal_id}": ["/v1/agents/a1/proposals/nope"],
    "/v1/progress": ["/v1/progress"],
}


def test_head_works_wherever_get_does(db: Database, api_url: str, a: Tenant) -> None:
    from hango.api.app import create_app

    paths = create_app(db).openapi()["paths"]
    assert {p for p, ops in paths.items() if "get" in ops} == set(GET_URLS), \
        "a GET route without a HEAD check here"
    with http(api_url, a.owner) as c:
        assert c.put(f"/v1/agents/a1/files{NOTE}", content=b"hello").is_success
        for url in [u for urls in GET_URLS.values() for u in urls]:
            got, head = c.get(url), c.head(url)
            assert head.status_code == got.status_code, url
            assert head.content == b"", url
            same = ("content-type", "content-length", "etag", "allow", "www-authenticate")
            assert {k: head.headers.get(k) for k in same} == \
                   {k: got.headers.get(k) for k in same}, url
        file_head = c.head(f"/v1/agents/a1/files{NOTE}")
        assert (file_head.status_code, file_head.headers["content-length"]) == (200, "5")
        assert file_head.headers["etag"] == c.get(f"/v1/agents/a1/files{NOTE}").headers["etag"]
    with http(api_url, None) as anonymous:  # HEAD is authenticated like GET
        assert anonymous.head(f"/v1/agents/a1/files{NOTE}").status_code == 401


def test_a_statement_the_database_refuses_is_500_naming_the_class(db: Database) -> None:
    """A privilege the app role lacks (revoked here, in a database of the test's own) is not
    "database unavailable" (503) nor "the model failed" (502): 500 naming the error class and
    what to check, through every door (a route, a run, the plain GET on the event loop), and
    not the server's own words (they name tables and statements)."""
    if db.settings.database_url is not None:
        pytest.skip("needs a database of its own: the embedded server's (a pooler exposes one)")
    private = Database(load_settings(database_name="hango_refused_" + uuid.uuid4().hex[:8],
                                     database_url=db.settings.database_url, data_dir=db.data_dir))
    try:
        tenant = create_tenant(private, "refused")
        save_agent(private, tenant, "a1", AgentConfig())
        token = create_token(private, tenant, "owner")
        with private.admin() as conn:
            conn.execute("REVOKE SELECT ON agent_files FROM hango_app")
        url, stop = serve_in_thread(create_app(private))
        try:
            with http(url, token) as c:
                answers = [c.get("/v1/agents/a1/files/memories/AGENTS.md"),  # the plain GET
                           c.get("/v1/agents/a1/files?dir=/"),
                           c.post("/v1/agents/a1/runs", json={"prompt": "hi"})]
        finally:
            stop()
    finally:
        private.close()
        with psycopg.connect(private._maintenance_conninfo, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {private.name} WITH (FORCE)")
    for response in answers:
        detail = response.json()["detail"]
        assert response.status_code == 500, (response.request.url, response.text)
        assert detail.startswith("the database refused a statement: InsufficientPrivilege "
                                 "(42501): check the role hango's transactions run as"), detail
        assert "agent_files" not in detail and "permission denied" not in detail
        assert "Retry-After" not in response.headers


def test_database_unavailable_is_503(db: Database, a: Tenant) -> None:
    broken = Database(db.settings)
    broken.close()  # a pool that can hand out no connection, as when the server is gone
    url, stop = serve_in_thread(create_app(broken))
    try:
        response = httpx.get(f"{url}/v1/agents", headers={"Authorization": f"Bearer {a.owner}"})
    finally:
        stop()
    assert response.status_code == 503
    assert response.json()["detail"].startswith("database unavailable")


# --- the client --------------------------------------------------------------------------------


def test_client_round_trip(api_url: str, db: Database, a: Tenant) -> None:
    with FilesClient(api_url, a.owner, "a1") as files:
        assert files.write(MEMORY, "Be brief.") == 1
        assert files.read(MEMORY) == "Be brief."
        assert files.read_versioned(MEMORY) == ("Be brief.", 1)
        assert files.edit(MEMORY, "brief", "concise") == 2
        assert files.write("/notes/a b.md", "spaces and ünïcode", if_version=0) == 1
        assert files.read("/notes/a b.md") == "spaces and ünïcode"
        assert files.ls("/") == [Entry("/memories/", True, 0, 0), Entry("/notes/", True, 0, 0)]
        assert files.glob("/**/*.md") == [MEMORY, "/notes/a b.md"]
        with pytest.raises(ApiError) as stale:
            files.write(MEMORY, "lost", if_version=1)
        assert stale.value.status == 412 and "nothing was written" in stale.value.message
        files.delete("/notes/a b.md", if_version=1)
        with pytest.raises(ApiError) as gone:
            files.read("/notes/a b.md")
        assert gone.value.status == 404
        with pytest.raises(ApiError) as traversal:  # the client does not resolve '..' either
            files.write("/notes/../memories/AGENTS.md", "x")
        assert traversal.value.status == 422 and "'..' segment" in traversal.value.message
        config = files.put_agent(AgentConfig(memory=["/memories/AGENTS.md"]))
        assert files.get_agent() == config
        assert files.list_agents() == ["a1", "only-a"]
    with FilesClient(api_url, a.member, "a1") as files:
        with pytest.raises(ApiError) as refused:
            files.write(MEMORY, "x")
        assert refused.value.status == 403 and "only an owner or admin" in str(refused.value)
    assert content(db, a.id, MEMORY) == "Be concise."


# --- the auth matrix ---------------------------------------------------------------------------

PRINCIPALS = ["none", "bad", "other-owner", "other-member", "member", "admin", "owner"]
FILE_OPS = ["read", "write", "edit", "delete"]
OTHER_OPS = ["ls", "glob", "get-agent", "put-agent", "list-agents"]


@pytest.fixture(scope="module")
def world(db: Database) -> tuple[Tenant, Tenant]:
    return _tenant(db, "target"), _tenant(db)


def _token(principal: str, a: Tenant, b: Tenant) -> str | None:
    return {"none": None, "bad": "hango_bogus", "other-owner": b.owner,
            "other-member": b.member, "member": a.member, "admin": a.admin,
            "owner": a.owner}[principal]


def _expected(principal: str, op: str, path: str | None) -> int:
    if principal in ("none", "bad"):
        return 401
    if principal.startswith("other-"):
        if op == "list-agents":
            return 200
        if op == "put-agent":  # creates the agent in its *own* tenant, if it may
            return 201 if principal == "other-owner" else 403
        return 404
    writes = op in ("write", "edit", "delete", "put-agent")
    reserved = path is not None and path != NOTE
    if writes and principal == "member" and (reserved or op == "put-agent"):
        return 403
    return {"delete": 204}.get(op, 200)


CASES = [(p, op, path) for p in PRINCIPALS for op in FILE_OPS for path in (MEMORY, SKILL, NOTE)]
CASES += [(p, op, None) for p in PRINCIPALS for op in OTHER_OPS]


@pytest.mark.parametrize(("principal", "op", "path"), CASES)
def test_auth_matrix(
    api_url: str, db: Database, world: tuple[Tenant, Tenant],
    principal: str, op: str, path: str | None,
) -> None:
    a, b = world
    backend = PostgresBackend(db, a.id, "target")
    if path is not None:
        backend.write(path, "seed")
    with db.admin(b.id) as conn:  # what an earlier case's PUT by the other tenant created
        conn.execute("DELETE FROM agents WHERE tenant_id = %s", [b.id])
    agent = "/v1/agents/target"
    requests = {
        "read": ("GET", f"{agent}/files{path}", {}),
        "write": ("PUT", f"{agent}/files{path}", {"content": "written"}),
        "edit": ("PATCH", f"{agent}/files{path}", {"json": {"old": "seed", "new": "edited"}}),
        "delete": ("DELETE", f"{agent}/files{path}", {}),
        "ls": ("GET", f"{agent}/files", {"params": {"dir": "/"}}),
        "glob": ("GET", f"{agent}/files", {"params": {"glob": "/**"}}),
        "get-agent": ("GET", agent, {}),
        "put-agent": ("PUT", agent, {"json": {"tools": ["read_file"]}}),
        "list-agents": ("GET", "/v1/agents", {}),
    }
    method, url, kwargs = requests[op]
    with http(api_url, _token(principal, a, b)) as c:
        response = c.request(method, url, **kwargs)
    expected = _expected(principal, op, path)
    assert response.status_code == expected, response.text
    if expected >= 400:
        assert response.json()["detail"]
    if expected == 401:
        assert "WWW-Authenticate" in response.headers

    # what the database holds afterwards: only an allowed write changed anything
    if path is not None:
        after = content(db, a.id, path, "target")
        changed = expected < 300 and op in ("write", "edit", "delete")
        assert after == ({"write": "written", "edit": "edited", "delete": None}[op]
                         if changed else "seed")
    if op == "list-agents" and expected == 200:
        names = response.json()["agents"]
        assert ("target" in names) == (not principal.startswith("other-"))
    if op == "put-agent":
        tools = load_agent(db, a.id, "target")
        assert tools is not None
        assert (tools.tools == ["read_file"]) == (expected == 200)
        save_agent(db, a.id, "target", AgentConfig())
