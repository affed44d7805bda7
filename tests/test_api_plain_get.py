"""A plain GET of a file is answered in one statement (``hango.api.plain_get``).

The same GET with a query string goes through the FastAPI route, which is the reference: both
doors must give the same bytes, refuse a revoked or expired token on the very next request,
and never show another tenant's file.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import psycopg
import pytest
from starlette.testclient import TestClient

from hango.agents import (
    create_tenant,
    create_token,
    mint_token,
    revoke_token,
    save_agent,
    token_digest,
)
from hango.api.app import create_app, serve_in_thread
from hango.db import APP_ROLE, Database
from hango.fs.backend import PostgresBackend


@pytest.fixture(scope="module")
def base_url(db: Database) -> Iterator[str]:
    url, stop = serve_in_thread(create_app(db))
    yield url
    stop()


def _tenant(db: Database, *agents: str) -> str:
    tenant = create_tenant(db, "get-" + uuid.uuid4().hex[:12])
    for agent in agents:
        save_agent(db, tenant, agent)
    return tenant


class Raw:
    """One kept-alive HTTP/1.1 connection that sends and returns bytes as they are."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        assert parts.hostname is not None and parts.port is not None
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
        self.buf = b""

    def get(self, target: str, token: str) -> tuple[int, list[bytes], bytes]:
        """Status, header lines (without Date), body."""
        self.sock.sendall(f"GET {target} HTTP/1.1\r\nHost: t\r\n"
                          f"Authorization: Bearer {token}\r\n\r\n".encode())
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status, *lines = head.split(b"\r\n")
        length = next(int(line.split(b":")[1]) for line in lines
                      if line.lower().startswith(b"content-length:"))
        while len(self.buf) < length:
            self.buf += self.sock.recv(65536)
        body, self.buf = self.buf[:length], self.buf[length:]
        return (int(status.split()[1]),
                [line for line in lines if not line.lower().startswith(b"date:")], body)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(base_url: str) -> Iterator[Raw]:
    client = Raw(base_url)
    yield client
    client.close()


def statements(db: Database, raw: Raw, target: str, token: str) -> tuple[int, int]:
    """How many pooled connections the server took to answer ``target`` (one per statement or
    transaction): from the pool of worker threads, and from the event loop's
    (``Database.statement_async``: no hand-off to a thread)."""
    raw.get(target, token)  # the first plain GET opens the loop's pool
    loop_pools = list(db._async_pools.values())  # this server's, and idle ones of other servers
    for pool in (db.pool, *loop_pools):
        pool.pop_stats()
    raw.get(target, token)
    return (int(db.pool.pop_stats().get("requests_num", 0)),
            sum(int(pool.pop_stats().get("requests_num", 0)) for pool in loop_pools))


@pytest.mark.parametrize("path, text", [
    ("/notes/x.md", "plain ASCII\n"),
    ("/memories/AGENTS.md", "Réponds en français. 日本語 🙂"),
    ("/notes/empty", ""),
    ("/notes/a b/c%d.md", "escaped path"),
])
def test_a_plain_get_is_one_statement_and_answers_as_the_route(
        db: Database, raw: Raw, path: str, text: str) -> None:
    tenant = _tenant(db, "a1")
    token = create_token(db, tenant, "member")
    version = 0
    for _ in range(2):
        version = PostgresBackend(db, tenant, "a1").write(path, text)
    url = "/v1/agents/a1/files" + path.replace("%", "%25").replace(" ", "%20")
    plain, route = raw.get(url, token), raw.get(url + "?via=route", token)
    assert plain == route
    assert plain[0] == 200 and plain[2] == text.encode()
    assert f'etag: "{version}"'.encode() in [h.lower() for h in plain[1]]
    assert statements(db, raw, url, token) == (0, 1)  # one statement, on the event loop
    # through the route: the token, one statement on the event loop; the file, in a thread
    assert statements(db, raw, url + "?via=route", token) == (1, 1)


def test_what_a_plain_get_does_not_serve_the_route_answers(db: Database, raw: Raw) -> None:
    """No such file or agent, a file over the cap, a file that is not UTF-8 (or whole and ending
    in the middle of a character): the same status and body as through the route."""
    tenant = _tenant(db, "a1")
    token = create_token(db, tenant, "owner")
    with db.admin() as conn:
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                     " VALUES (%s, 'a1', '/bin', '\\xfffe'::bytea, 2)", [tenant])
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                     " VALUES (%s, 'a1', '/cut', '\\x6162e282'::bytea, 4)", [tenant])  # ends mid-€
    cap = db.settings.max_file_bytes
    with db.admin() as conn:
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                     " VALUES (%s, 'a1', '/big', %s, %s)", [tenant, b"o" * (cap + 1), cap + 1])
    for url, status, detail in [
        ("/v1/agents/a1/files/none", 404, "no such file: /none"),
        ("/v1/agents/nobody/files/none", 404, "no agent 'nobody' in this tenant"),
        ("/v1/agents/a1/files/bin", 409, "/bin: not UTF-8 text at byte 0"),
        ("/v1/agents/a1/files/cut", 409, "/cut: not UTF-8 text at byte 2"),  # whole, not cut
        ("/v1/agents/a1/files/big", 409, f"/big: the file is {cap + 1} bytes"),
        ("/v1/agents/a1/files/a/../b", 422, "'..'"),
        ("/v1/agents/A1/files/x", 422, "agent_id (URL)"),
    ]:
        plain, route = raw.get(url, token), raw.get(url + "?via=route", token)
        assert plain == route, url
        assert plain[0] == status and detail in plain[2].decode(), (url, plain)


def test_a_revoked_or_expired_token_is_refused_on_the_very_next_plain_get(
        db: Database, raw: Raw) -> None:
    tenant = _tenant(db, "a1")
    PostgresBackend(db, tenant, "a1").write("/notes/x.md", "secret")
    revoked, revoked_id = mint_token(db, tenant, "member")
    expiring = create_token(db, tenant, "member", expires_at=datetime.now(UTC) + timedelta(hours=1))
    url = "/v1/agents/a1/files/notes/x.md"
    for token in (revoked, expiring):
        assert raw.get(url, token)[0] == 200
    assert revoke_token(db, revoked_id) == tenant
    with db.admin() as conn:  # the hour has passed
        conn.execute("UPDATE api_tokens SET expires_at = now() - interval '1 second'"
                     " WHERE token_sha256 = %s", [token_digest(expiring)])
    for token in (revoked, expiring):
        status, headers, body = raw.get(url, token)
        assert status == 401
        assert body == b'{"detail":"unknown bearer token (or revoked, or expired)"}'
        assert b'www-authenticate: Bearer realm="hango", error="invalid_token"' in headers


def test_another_tenants_file_is_404_never_its_content(db: Database, raw: Raw) -> None:
    a, b = _tenant(db, "a1", "only-a"), _tenant(db, "a1")
    PostgresBackend(db, a, "a1").write("/notes/x.md", "A's")
    PostgresBackend(db, a, "only-a").write("/notes/x.md", "A's too")
    token_a, token_b = create_token(db, a, "owner"), create_token(db, b, "owner")
    url = "/v1/agents/a1/files/notes/x.md"
    assert raw.get(url, token_b)[:3:2] == (404, b'{"detail":"no such file: /notes/x.md"}')
    assert raw.get("/v1/agents/only-a/files/notes/x.md", token_b)[:3:2] == (
        404, b'{"detail":"no agent \'only-a\' in this tenant"}')
    PostgresBackend(db, b, "a1").write("/notes/x.md", "B's")
    assert raw.get(url, token_b)[2] == b"B's"
    assert raw.get(url, token_a)[2] == b"A's"


def test_the_tenant_the_read_sets_ends_with_its_statement(db: Database) -> None:
    """The pooled connection goes back with no tenant set: the next request starts from none."""
    tenant = _tenant(db, "a1")
    PostgresBackend(db, tenant, "a1").write("/x", "x")
    token = create_token(db, tenant, "member")
    with psycopg.connect(db.app_conninfo, autocommit=True) as conn:
        if not db.embedded:
            conn.execute(f"SET ROLE {APP_ROLE}")
        row = conn.execute("SELECT tenant_id, content FROM hango_read_file(%s, 'a1', '/x', 10)",
                           [token_digest(token)]).fetchone()
        assert row == (tenant, b"x")
        assert conn.execute("SELECT current_setting('hango.tenant_id', true)").fetchone() in (
            ("",), (None,))
        assert conn.execute("SELECT count(*) FROM agent_files").fetchone() == (0,)  # RLS: none


def test_the_read_takes_the_app_role_itself_for_its_transaction_only(db: Database) -> None:
    """``hango_read_file`` is one statement, so nothing can take the app role before it: it
    takes it itself, for its own transaction only. Called here by the owner (the URL's role, or
    the embedded server's superuser), inside a transaction: the rest of that transaction runs as
    ``hango_app``; the next transaction on the same connection as the owner again."""
    tenant = _tenant(db, "a1")
    PostgresBackend(db, tenant, "a1").write("/x", "x")
    token = create_token(db, tenant, "member")
    with db.admin_connection() as conn:
        owner = conn.execute("SELECT current_user").fetchone()
        assert owner != (APP_ROLE,)
        row = conn.execute("SELECT tenant_id, content FROM hango_read_file(%s, 'a1', '/x', 10)",
                           [token_digest(token)]).fetchone()
        assert row == (tenant, b"x")
        assert conn.execute("SELECT current_user").fetchone() == (APP_ROLE,)
        conn.commit()
        assert conn.execute("SELECT current_user").fetchone() == owner


def test_a_plain_get_with_the_database_away_is_503(db: Database) -> None:
    tenant = _tenant(db, "a1")
    token = create_token(db, tenant, "member")
    broken = Database(db.settings)
    broken.close()  # a pool that can hand out no connection, as when the server is gone
    url, stop = serve_in_thread(create_app(broken))
    client = Raw(url)
    try:
        status, headers, body = client.get("/v1/agents/a1/files/x", token)
    finally:
        client.close()
        stop()
    assert status == 503 and body.startswith(b'{"detail":"database unavailable')
    assert b"retry-after: 5" in [h.lower() for h in headers]


def test_a_loop_that_never_runs_the_apps_lifespan_is_left_no_pool(db: Database) -> None:
    """A ``TestClient`` used outside ``with`` runs every request on a loop of its own and never
    the app's lifespan, which closes the loop's pool: there the plain GET goes to a worker
    thread, and no pool (with its connections) is left behind per request. Inside ``with``,
    the loop's pool is opened, and closed when the lifespan ends."""
    tenant = _tenant(db, "a1")
    PostgresBackend(db, tenant, "a1").write("/notes/x.md", "x")
    auth = {"Authorization": f"Bearer {create_token(db, tenant, 'member')}"}
    url = "/v1/agents/a1/files/notes/x.md"
    app = create_app(db)
    before = set(db._async_pools)
    outside = TestClient(app)
    for _ in range(5):
        assert outside.get(url, headers=auth).text == "x"
    assert set(db._async_pools) == before
    with TestClient(app) as inside:
        assert inside.get(url, headers=auth).text == "x"
        assert len(set(db._async_pools) - before) == 1
    assert set(db._async_pools) == before
