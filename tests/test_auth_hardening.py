"""The token lookup cannot be hijacked, nobody unauthenticated gets
a body read, and tokens expire and are revoked.

- 10.2: every SECURITY DEFINER function pins ``search_path = pg_catalog, public, pg_temp`` and
  qualifies its tables, and the app role can create nothing to shadow them with (no TEMP on
  the database, no CREATE on public). The attacks are tried as they were found: a temporary
  table named ``api_tokens`` holding a forged owner row, a temporary view that reads server
  files through ``pg_read_file``, and ``pg_read_file`` itself.
- 10.5: no token, or a bad one, is 401 before a byte of the body is read.
- 10.7: optional expiry, listing without the secret, revocation (CLI functions and the owner's
  API), 401 at once; the last use is recorded at most once a minute (no write per request).
"""

from __future__ import annotations

import hashlib
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from hango.agents import (
    AgentConfig,
    create_tenant,
    create_token,
    expiry_from,
    list_tokens,
    mint_token,
    owner_create_token,
    owner_list_tokens,
    principal_for,
    revoke_token,
    save_agent,
    token_digest,
)
from hango.db import APP_ROLE, Database
from hango.fs.backend import PostgresBackend

FORGED = hashlib.sha256(b"forged").digest()
FORGED_SQL = f"'\\x{FORGED.hex()}'::bytea"  # DDL takes no parameters


def app_connection(db: Database) -> psycopg.Connection[Any]:
    """A session as the app role, as the application opens one (autocommit: each try alone)."""
    conn = psycopg.connect(db.app_conninfo, autocommit=True)
    if not db.embedded:
        conn.execute(f"SET ROLE {APP_ROLE}")
    assert conn.execute("SELECT current_user").fetchone() == (APP_ROLE,)
    return conn


# --- 10.2: the SECURITY DEFINER functions ---------------------------------------------------


def test_every_security_definer_function_is_pinned(db: Database) -> None:
    with db.admin() as conn:
        rows = conn.execute(
            """SELECT p.proname, p.proconfig FROM pg_proc p
                WHERE p.prosecdef AND p.pronamespace = 'public'::regnamespace""").fetchall()
    assert {name for name, _ in rows} >= {"hango_principal", "hango_token_list",
                                          "hango_token_create", "hango_token_revoke"}
    for name, config in rows:
        paths = [c.removeprefix("search_path=") for c in config or ()
                 if c.startswith("search_path=")]
        assert paths, f"{name} has no SET search_path"
        schemas = [s.strip() for s in paths[0].split(",")]
        assert schemas[0] == "pg_catalog" and schemas[-1] == "pg_temp", (name, schemas)
        assert set(schemas) <= {"pg_catalog", "public", "pg_temp"}, (name, schemas)


@pytest.mark.parametrize("attack", [
    "CREATE TEMP TABLE api_tokens (token_sha256 bytea, tenant_id text, role text)",
    f"CREATE TEMP VIEW api_tokens AS SELECT {FORGED_SQL} AS token_sha256,"
    " pg_read_file('/etc/hostname') AS tenant_id, 'owner' AS role",
    "CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT NULL'",
    "CREATE TABLE public.api_tokens_shadow (x int)",
    "CREATE FUNCTION public.shadow() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "SELECT pg_read_file('/etc/hostname')",
    "SELECT pg_ls_dir('.')",
    "SELECT count(*) FROM public.api_tokens",
    "SELECT count(*) FROM public.hango_schema",
])
def test_the_app_role_cannot_shadow_or_read_what_it_must_not(db: Database, attack: str) -> None:
    with app_connection(db) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(attack)


def test_a_temporary_table_or_view_does_not_hijack_the_lookup(db: Database, tenant: str) -> None:
    """Even a session that MAY create temporary objects (the superuser's: the app role may not,
    above) cannot make hango_principal find them: its search_path has pg_temp last and it reads
    public.api_tokens. On the old definition (search_path = public) both forged an owner."""
    token = create_token(db, tenant, "member")
    with psycopg.connect(db.admin_conninfo, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE api_tokens (token_sha256 bytea, tenant_id text, role text,"
                     " expires_at timestamptz, last_used_at timestamptz)")
        conn.execute("INSERT INTO pg_temp.api_tokens VALUES (%s, %s, 'owner', NULL, NULL),"
                     " (%s, %s, 'owner', NULL, NULL)",
                     [FORGED, tenant, token_digest(token), tenant])
        assert conn.execute("SELECT * FROM hango_principal(%s)", [FORGED]).fetchall() == []
        assert conn.execute("SELECT * FROM hango_principal(%s)",
                            [token_digest(token)]).fetchall() == [(tenant, "member")]
        conn.execute("DROP TABLE pg_temp.api_tokens")
        conn.execute(f"CREATE TEMP VIEW api_tokens AS SELECT {FORGED_SQL} AS token_sha256,"
                     " pg_read_file('/etc/hostname') AS tenant_id, 'owner'::text AS role,"
                     " NULL::timestamptz AS expires_at, NULL::timestamptz AS last_used_at")
        assert conn.execute("SELECT * FROM hango_principal(%s)", [FORGED]).fetchall() == []
        assert conn.execute("SELECT * FROM hango_token_list(%s)", [FORGED]).fetchall() == []


def test_the_token_functions_need_a_live_owner_token(db: Database, tenant: str) -> None:
    """Called as the app role with anything but an owner's token, they see and change nothing."""
    member = create_token(db, tenant, "member")
    owner, owner_id = mint_token(db, tenant, "owner")
    with app_connection(db) as conn:
        for caller in (FORGED, token_digest(member)):
            assert conn.execute("SELECT * FROM hango_token_list(%s)", [caller]).fetchall() == []
            assert conn.execute("SELECT hango_token_revoke(%s, %s)",
                                [caller, owner_id]).fetchone() == (None,)  # no live owner
            assert conn.execute("SELECT * FROM hango_token_create(%s, %s, 'x1', 'owner', '', NULL)",
                                [caller, FORGED]).fetchall() == []
    assert principal_for(db, owner) is not None
    assert len(list_tokens(db, tenant)) == 2


# --- the API: 10.5 and 10.7 -------------------------------------------------------------------


@pytest.fixture
def agent(db: Database, tenant: str) -> str:
    save_agent(db, tenant, "a1", AgentConfig())
    return tenant


NO_TOKEN: list[dict[str, str]] = [{}, {"Authorization": "Bearer hango_not-a-token"},
                                  {"Authorization": "Basic eDp5"}]


@pytest.mark.parametrize("headers", NO_TOKEN, ids=["none", "unknown", "basic"])
@pytest.mark.parametrize(("method", "path"), [
    ("PATCH", "/v1/agents/a1/files/notes/x.md"),
    ("PUT", "/v1/agents/a1"),
    ("POST", "/v1/tokens"),
    ("PUT", "/v1/agents/a1/files/notes/x.md"),
])
def test_malformed_body_without_a_valid_token_is_401(api_url: str, agent: str, method: str,
                                                     path: str, headers: dict[str, str]) -> None:
    response = httpx.request(method, api_url + path, content=b'{"old": nope',
                             headers={**headers, "Content-Type": "application/json"})
    assert response.status_code == 401, response.text
    assert "WWW-Authenticate" in response.headers


def test_401_comes_before_the_body_is_read(api_url: str, agent: str) -> None:
    """A request that announces 1 MB and sends 10 bytes is answered 401 at once: the server does
    not wait for a body it will never read (before, it waited for all of it, then said 422)."""
    where = urlsplit(api_url)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(b"PATCH /v1/agents/a1/files/notes/x.md HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
                     b'{"old": "a')
        reply = sock.recv(65536)  # a server waiting for the body would time out here (30 s)
    assert reply.startswith(b"HTTP/1.1 401 "), reply[:200]


def test_a_valid_token_still_gets_the_body_checked(db: Database, api_url: str,
                                                   agent: str) -> None:
    token = create_token(db, agent, "owner")
    response = httpx.patch(f"{api_url}/v1/agents/a1/files/notes/x.md", content=b'{"old": nope',
                           headers={"Authorization": f"Bearer {token}",
                                    "Content-Type": "application/json"})
    assert response.status_code == 422 and "JSON" in response.text


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_revoked_or_expired_token_is_401_at_once(db: Database, api_url: str,
                                                   agent: str) -> None:
    files = f"{api_url}/v1/agents/a1/files"
    revoked, revoked_id = mint_token(db, agent, "member")
    expiring, expiring_id = mint_token(db, agent, "member",
                                       expires_at=datetime.now(UTC) + timedelta(hours=1))
    with httpx.Client() as client:  # one kept-alive connection: nothing cached per connection
        for token in (revoked, expiring):
            assert client.get(files, headers=_auth(token)).status_code == 200
        assert revoke_token(db, revoked_id) == agent
        with db.admin() as conn:  # the hour has passed
            conn.execute("UPDATE api_tokens SET expires_at = now() - interval '1 second'"
                         " WHERE token_id = %s", [expiring_id])
        for token in (revoked, expiring):
            response = client.get(files, headers=_auth(token))
            assert response.status_code == 401, response.text
            assert "revoked" in response.json()["detail"]
            assert principal_for(db, token) is None
    assert revoke_token(db, revoked_id) is None  # once


# Every kind of request a learner's loop sends: each looks its token up anew (nothing is kept
# between requests), so a revoke is seen by the very next one, whichever it is.
DOORS = [("PUT", "/v1/agents/a1/files/memories/AGENTS.md", b"hi"),
         ("GET", "/v1/agents/a1/files/memories/AGENTS.md", None),  # the plain GET's own door
         ("GET", "/v1/agents/a1/files", None),  # a listing
         ("POST", "/v1/agents/a1/runs", b'{"prompt": "hello"}'),
         ("GET", "/v1/agents/a1", None)]


@pytest.mark.parametrize(("method", "path", "body"), DOORS,
                         ids=["put", "plain-get", "listing", "run", "agent"])
def test_a_revoked_token_is_401_on_the_very_next_request_of_each_kind(
        db: Database, api_url: str, agent: str, method: str, path: str, body: bytes | None) -> None:
    token, token_id = mint_token(db, agent, "owner")
    create_token(db, agent, "owner")  # the tenant keeps a live owner
    PostgresBackend(db, agent, "a1").write("/memories/AGENTS.md", "hi")
    headers = {**_auth(token), "Content-Type": "application/json" if method == "POST"
               else "text/plain; charset=utf-8"}
    with httpx.Client(base_url=api_url) as client:  # one kept-alive connection
        for _ in range(3):  # warm: the same request, the same connection
            response = client.request(method, path, content=body, headers=headers)
            assert response.status_code < 300, response.text
        assert revoke_token(db, token_id) == agent
        response = client.request(method, path, content=body, headers=headers)
    assert response.status_code == 401, response.text
    assert response.json() == {"detail": "unknown bearer token (or revoked, or expired)"}


def test_expiry_is_checked_at_creation() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert expiry_from("30d", now) == now + timedelta(days=30)
    assert expiry_from("90m", now) == now + timedelta(minutes=90)
    assert expiry_from("2027-01-31", now) == datetime(2027, 1, 31, tzinfo=UTC)
    with pytest.raises(ValueError, match="neither a duration"):
        expiry_from("soon")


def test_past_expiry_is_refused(db: Database, tenant: str) -> None:
    with pytest.raises(ValueError, match="not in the future"):
        create_token(db, tenant, "owner", expires_at=datetime.now(UTC) - timedelta(seconds=1))


def test_last_use_is_recorded_at_most_once_a_minute(db: Database, api_url: str,
                                                    agent: str) -> None:
    token, token_id = mint_token(db, agent, "member")
    (info,) = [t for t in list_tokens(db, agent) if t.token_id == token_id]
    assert info.last_used_at is None

    def row_version() -> tuple[Any, ...]:
        with db.admin() as conn:
            row = conn.execute("SELECT xmin::text, last_used_at FROM api_tokens"
                               " WHERE token_id = %s", [token_id]).fetchone()
        assert row is not None
        return tuple(row)

    with httpx.Client(base_url=api_url, headers=_auth(token)) as client:
        assert client.get("/v1/agents").status_code == 200
        first = row_version()
        assert first[1] is not None
        for _ in range(20):
            assert client.get("/v1/agents").status_code == 200
    assert row_version() == first  # 20 requests, no write: the row version did not change
    with db.admin() as conn:  # a minute has passed
        conn.execute("UPDATE api_tokens SET last_used_at = last_used_at - interval '61 seconds'"
                     " WHERE token_id = %s", [token_id])
    assert principal_for(db, token) is not None
    assert row_version()[1] > first[1] - timedelta(seconds=61)


def test_concurrent_token_creates_never_pass_the_cap(db: Database, agent: str) -> None:
    """1,000 tokens a tenant: 12 owners' creates at once, with 995 there, make exactly 5 more.
    The creates take turns on a lock of their own (the tenant's row is behind row-level security,
    which holds the schema's owner too: a row lock there would lock no row)."""
    owner = create_token(db, agent, "owner")
    with db.admin(agent) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO api_tokens (token_sha256, tenant_id, role) VALUES (%s, %s, "
                        "'member')", [[token_digest(f"filler-{agent}-{i}"), agent]
                                      for i in range(994)])
    made: list[object] = []
    refused: list[str] = []
    start = threading.Barrier(12)

    def create() -> None:
        start.wait()
        try:
            made.append(owner_create_token(db, owner, "member"))
        except psycopg.errors.CheckViolation as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=create) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 5 and len(refused) == 7, (len(made), refused[:1])
    assert "already has 1000 tokens" in refused[0]
    assert len(list_tokens(db, agent)) == 1000


def test_owners_manage_their_tokens_over_the_api(db: Database, api_url: str,
                                                 agent: str) -> None:
    owner = create_token(db, agent, "owner", "the owner")
    other = create_tenant(db, "t-" + uuid.uuid4().hex[:12])
    _, foreign_id = mint_token(db, other, "owner")
    with httpx.Client(base_url=api_url, headers=_auth(owner)) as client:
        expires = (datetime.now(UTC) + timedelta(days=7)).isoformat()
        made = client.post("/v1/tokens", json={"role": "member", "label": "ci",
                                               "expires_at": expires})
        assert made.status_code == 201, made.text
        new = made.json()
        assert new["token"].startswith("hango_") and new["role"] == "member"
        assert new["expires_at"] is not None and new["label"] == "ci"
        listed = client.get("/v1/tokens").json()["tokens"]
        assert {t["id"] for t in listed} == {t.token_id for t in list_tokens(db, agent)}
        assert all("token" not in t for t in listed)  # never the secret
        assert {t["label"] for t in listed} == {"the owner", "ci"}
        assert principal_for(db, new["token"]) is not None
        # another tenant's token is not there to revoke (404, and it still works)
        assert client.delete(f"/v1/tokens/{foreign_id}").status_code == 404
        assert [t.token_id for t in list_tokens(db, other)] == [foreign_id]
        assert client.delete(f"/v1/tokens/{new['id']}").status_code == 204
        assert client.delete(f"/v1/tokens/{new['id']}").status_code == 404
        assert httpx.get(f"{api_url}/v1/agents",
                         headers=_auth(new["token"])).status_code == 401
        past = client.post("/v1/tokens", json={"role": "member",
                                               "expires_at": "2001-01-01T00:00:00Z"})
        assert past.status_code == 422 and "not in the future" in past.text
        bad = client.post("/v1/tokens", json={"role": "root"})
        assert bad.status_code == 422
    for role in ("admin", "member"):
        token = create_token(db, agent, role)
        with httpx.Client(base_url=api_url, headers=_auth(token)) as client:
            for response in (client.get("/v1/tokens"),
                             client.post("/v1/tokens", json={"role": "owner"}),
                             client.delete(f"/v1/tokens/{new['id']}")):
                assert response.status_code == 403, response.text
                assert "only an owner" in response.json()["detail"]
    assert len(owner_list_tokens(db, owner)) == 3  # owner, admin, member


def test_a_label_with_control_characters_is_refused_naming_the_character(
        db: Database, api_url: str, agent: str) -> None:
    owner = create_token(db, agent, "owner", "the owner")
    with httpx.Client(base_url=api_url, headers=_auth(owner)) as client:
        for label, at in (("red \x1b[31malert", "U+001B at position 4"), ("a\nb", "U+000A at "
                          "position 1"), ("x\u2028", "U+2028 at position 1"), ("\x9b2J", "U+009B "
                          "at position 0")):
            got = client.post("/v1/tokens", json={"role": "member", "label": label})
            assert got.status_code == 422, got.text
            assert got.json()["detail"] == f"label must not contain control characters: {at}"
        ok = client.post("/v1/tokens", json={"role": "member", "label": "ci – bot 👩‍💻"})
        assert ok.status_code == 201 and ok.json()["label"] == "ci – bot 👩‍💻"
    with pytest.raises(ValueError, match="U\\+001B at position 0"):
        create_token(db, agent, "member", "\x1b]0;pwned\x07")  # the CLI's door: one rule
    assert {t.label for t in list_tokens(db, agent)} == {"the owner", "ci – bot 👩‍💻"}


def test_the_last_owner_token_is_not_revoked_over_the_api(db: Database, api_url: str,
                                                          agent: str) -> None:
    owner, owner_id = mint_token(db, agent, "owner", "first")
    create_token(db, agent, "member")  # not an owner: does not count
    _, expired_id = mint_token(db, agent, "owner", "gone",
                               expires_at=datetime.now(UTC) + timedelta(seconds=1))
    with db.admin() as conn:
        conn.execute("UPDATE api_tokens SET expires_at = now() - interval '1 second' "
                     "WHERE token_id = %s", [expired_id])  # expired: does not count either
    with httpx.Client(base_url=api_url, headers=_auth(owner)) as client:
        refused = client.delete(f"/v1/tokens/{owner_id}")
        assert refused.status_code == 409, refused.text
        assert refused.json()["detail"] == (
            f"token {owner_id} is the last owner token of this tenant: without it nobody could "
            "manage the tenant over the API; create another owner token first, then revoke "
            "this one (an administrator can still revoke it: hango token revoke)")
        assert principal_for(db, owner) is not None  # nothing was revoked
        second = client.post("/v1/tokens", json={"role": "owner"}).json()
        assert client.delete(f"/v1/tokens/{owner_id}").status_code == 204  # now it may go
    with httpx.Client(base_url=api_url, headers=_auth(second["token"])) as client:
        assert client.delete(f"/v1/tokens/{second['id']}").status_code == 409


def test_two_owners_revoking_each_other_at_once_leave_one(db: Database, api_url: str,
                                                          agent: str) -> None:
    """Both revokes are held at their DELETE (the test locks the two token rows) until both have
    checked what they can: without the tenant's lock, each saw another owner and both went."""
    import threading
    import time

    pairs = [mint_token(db, agent, "owner") for _ in range(2)]
    for token, _ in pairs:  # used once: its last use is recorded now, not under the lock below
        assert principal_for(db, token) is not None
    codes: list[int] = []

    def revoke(mine: str, theirs: str) -> None:
        codes.append(httpx.delete(f"{api_url}/v1/tokens/{theirs}", headers=_auth(mine),
                                  timeout=60).status_code)

    threads = [threading.Thread(target=revoke, args=(pairs[0][0], pairs[1][1])),
               threading.Thread(target=revoke, args=(pairs[1][0], pairs[0][1]))]
    with db.admin() as holder, db.admin() as watcher:
        holder.execute("SELECT 1 FROM api_tokens WHERE token_id = ANY(%s) FOR UPDATE",
                       [[pairs[0][1], pairs[1][1]]])
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30  # a bound on waiting, not a figure asserted
        while watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                              "'Lock' AND query LIKE '%%hango_token_revoke%%'").fetchone() != (2,):
            watcher.rollback()
            assert time.monotonic() < deadline, "the two revokes never both waited"
            time.sleep(0.01)
        holder.commit()
    for t in threads:
        t.join()
    assert sorted(codes) == [204, 409]  # one wins; the other is refused
    assert [t.role for t in list_tokens(db, agent)] == ["owner"]
