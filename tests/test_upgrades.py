"""A database an earlier release made is upgraded in place, keeping every row, to the same
catalog as a fresh install; a newer one, or one of unknown shape, is refused with a message.

The earlier schemas are vendored (``tests/data/schema-<commit>.sql``: 85d6e28, the previous
release, and bd1c35e, the last single-file schema), because a shallow clone has no history to
read them from. Each is applied as its hango applied it, rows are put in as its hango wrote them
(a run's state and result as jsonb, a pending proposal without ``proposed_by``), then the current
code opens the database: the rows are all there, the files API, a token lookup, an approval, the
resume of the old interrupted run and a new run work on it, and its catalog (tables, columns,
types, defaults, constraints, indexes, policies, triggers, functions, grants, row-level security)
equals a fresh install's. On the embedded server (a superuser) and on a server where the owner is
not one (a CREATEROLE role, as a managed service gives: forced row-level security holds it).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb

from hango.agent.runtime import Agent
from hango.agents import (
    AgentConfig,
    Principal,
    create_tenant,
    list_tokens,
    principal_for,
    save_agent,
    token_digest,
)
from hango.api.app import create_app, serve_in_thread
from hango.db import Database, DatabaseError, EmbeddedServer
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call
from hango.settings import load_settings
from hango.upgrades import BASELINE, STEPS

DATA = Path(__file__).resolve().parent / "data"
RELEASES = ["85d6e28", "bd1c35e"]  # the previous release, and the last single-file schema
TENANT, OWNER, MEMBER = "up", "hango-upgrade-owner-token", "hango-upgrade-member-token"
SKILL = "---\nname: pdf\ndescription: Read PDF files.\n---\n\nStep 1: read it.\n"


@dataclass
class Server:
    """Where the databases go: a URL that owns what it creates, and one to create them with."""

    owner: str  # the URL hango is given (its role creates and owns the databases)
    data_dir: Path

    def database(self, name: str) -> Database:
        return Database(load_settings(database_url=self.owner, database_name=name,
                                      data_dir=self.data_dir))

    def create(self, name: str) -> str:
        with psycopg.connect(self.owner, dbname="postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name

    def drop(self, name: str) -> None:
        with psycopg.connect(self.owner, dbname="postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def connect(self, name: str) -> psycopg.Connection[Any]:
        return psycopg.connect(self.owner, dbname=name, autocommit=True)


@pytest.fixture(scope="module")
def embedded(db: Database) -> Server:
    """The suite's own server, whose admin is a superuser."""
    return Server(db._maintenance_conninfo, db.data_dir)


@pytest.fixture(scope="module")
def managed(server_dir: Path) -> Iterator[Server]:
    """A second server where hango's role is not a superuser (CREATEROLE, CREATEDB)."""
    server = EmbeddedServer.get(server_dir)
    try:
        superuser = str(server.get_uri())
        with psycopg.connect(superuser, autocommit=True) as conn:
            conn.execute("CREATE ROLE provider LOGIN CREATEROLE CREATEDB")
        yield Server(superuser.replace("postgresql://postgres:@", "postgresql://provider:@", 1),
                     server_dir)
    finally:
        EmbeddedServer.pg_ctl(server_dir, "stop", "-m", "fast")
        server.cleanup_mode = None


def apply_release(conn: psycopg.Connection[Any], release: str) -> None:
    """What that release's hango did at its first start: its schema.sql, then its version row."""
    ddl = (DATA / f"schema-{release}.sql").read_bytes()
    with conn.transaction():
        conn.execute(ddl)
        conn.execute("INSERT INTO hango_schema (version) VALUES (%s)",
                     [hashlib.sha256(ddl).hexdigest()])


def interrupted_run(db: Database) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """An ask-mode run stopped on a proposal, made by the current code in a scratch tenant: its
    config, its state and its proposal's row, as an earlier release stored them (no
    ``started_by``, no ``proposed_by``: the state's format is otherwise the same)."""
    scratch = create_tenant(db, "up-" + uuid.uuid4().hex[:10])
    config = AgentConfig(reserved_writes="ask")
    save_agent(db, scratch, "a1", config)
    model = SimulatedModel(policy=[[tool_call("write_file", {
        "path": "/memories/AGENTS.md", "content": "Answer in French.\nThe user prefers tea.\n"})]])
    result = Agent(db, scratch, "a1", model).run("remember: tea")
    assert result.status == "interrupted"
    with db.admin(scratch) as conn:
        state, = conn.execute("SELECT state FROM runs WHERE run_id = %s",
                              [result.run_id]).fetchone() or ()
        cur = conn.execute("SELECT * FROM proposals WHERE run_id = %s", [result.run_id])
        names = [c.name for c in cur.description or ()]
        proposal = dict(zip(names, cur.fetchone() or (), strict=True))
        config_json, = conn.execute("SELECT config FROM agents WHERE tenant_id = %s",
                                    [scratch]).fetchone() or ()
    state.pop("started_by")
    for key in ("tenant_id", "proposed_by"):
        proposal.pop(key)
    proposal["base_version"] = 3  # made against the memory file put_rows writes
    return config_json, state, proposal


def put_rows(conn: psycopg.Connection[Any], run: tuple[dict[str, Any], ...]) -> None:
    """Rows as an earlier release wrote them, as its admin (across tenants, which a release that
    forces row-level security on the owner too needs said)."""
    config, state, proposal = run
    conn.execute("SELECT set_config('hango.all_tenants', 'on', false)")
    conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s)", [TENANT])
    conn.execute("INSERT INTO agents (tenant_id, agent_id, config) VALUES (%s, 'a1', %s)",
                 [TENANT, Jsonb(config)])
    for path, text in [("/memories/AGENTS.md", "Answer in French.\n"),
                       ("/skills/pdf/SKILL.md", SKILL), ("/notes/x.md", "a note")]:
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size, version)"
                     " VALUES (%s, 'a1', %s, %s, %s, 3)", [TENANT, path, text.encode(), len(text)])
    for token, role in [(OWNER, "owner"), (MEMBER, "member")]:
        conn.execute("INSERT INTO api_tokens (token_sha256, tenant_id, role, label)"
                     " VALUES (%s, %s, %s, 'old')", [token_digest(token), TENANT, role])
    conn.execute("INSERT INTO runs (tenant_id, agent_id, run_id, status, state, result)"
                 " VALUES (%s, 'a1', 'old-done', 'done', NULL, %s)",
                 [TENANT, Jsonb({"text": "an answer from before", "usage": []})])
    conn.execute("INSERT INTO runs (tenant_id, agent_id, run_id, status, state, result,"
                 " proposal_id) VALUES (%s, 'a1', %s, 'interrupted', %s, '{}', %s)",
                 [TENANT, proposal["run_id"], Jsonb(state), proposal["proposal_id"]])
    columns = list(proposal)
    conn.execute(f"INSERT INTO proposals (tenant_id, {', '.join(columns)})"
                 f" VALUES (%s{', %s' * len(columns)})",
                 [TENANT, *(Jsonb(v) if k == "skill" and v is not None else v
                            for k, v in proposal.items())])


COUNTS = {t: f"SELECT count(*) FROM {t}" for t in
          ("tenants", "agents", "agent_files", "api_tokens", "runs", "proposals")}


def catalog(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """What makes the schema, read from the catalog (column order aside: a column an upgrade
    adds comes last)."""
    queries = {
        "columns": """SELECT table_name, column_name, data_type, udt_name, is_nullable,
                             column_default, collation_name, is_generated, generation_expression
                        FROM information_schema.columns WHERE table_schema = 'public'""",
        "storage": """SELECT c.relname, a.attname, a.attstorage FROM pg_attribute a
                        JOIN pg_class c ON c.oid = a.attrelid
                       WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
                         AND a.attnum > 0 AND NOT a.attisdropped""",
        "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
                            FROM pg_constraint WHERE connamespace = 'public'::regnamespace""",
        "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
        "policies": """SELECT tablename, policyname, roles::text, cmd, qual, with_check
                         FROM pg_policies WHERE schemaname = 'public'""",
        "security": """SELECT relname, relrowsecurity, relforcerowsecurity,
                              pg_get_userbyid(relowner), relacl::text FROM pg_class
                        WHERE relnamespace = 'public'::regnamespace""",
        "triggers": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
                         FROM pg_trigger WHERE NOT tgisinternal""",
        "functions": """SELECT proname, pg_get_function_identity_arguments(oid),
                               pg_get_functiondef(oid), proacl::text
                          FROM pg_proc WHERE pronamespace = 'public'::regnamespace""",
        "sequences": """SELECT sequencename, data_type::text FROM pg_sequences
                         WHERE schemaname = 'public'""",
    }
    return {name: sorted(conn.execute(q).fetchall(), key=repr) for name, q in queries.items()}


def upgrade_and_check(server: Server, db: Database, release: str) -> None:
    old, fresh = (server.create(f"hango_up_{kind}_{uuid.uuid4().hex[:6]}")
                  for kind in ("old", "new"))
    try:
        run = interrupted_run(db)
        with server.connect(old) as conn:
            apply_release(conn, release)
            put_rows(conn, run)
            before = {t: conn.execute(q).fetchone() for t, q in COUNTS.items()}
        upgraded = server.database(old)  # the current code opens it: the steps run in place
        try:
            with upgraded.admin(all_tenants=True) as conn:
                after = {t: conn.execute(q).fetchone() for t, q in COUNTS.items()}
                steps = {r[0] for r in conn.execute("SELECT step FROM hango_schema_steps")}
                done = conn.execute("SELECT pg_typeof(result)::text, result::text FROM runs"
                                    " WHERE run_id = 'old-done'").fetchone()
                usage = conn.execute("SELECT files FROM tenant_usage WHERE tenant_id = %s",
                                     [TENANT]).fetchone()
            assert after == before and before["agent_files"] == (3,)
            assert steps == {s.name for s in STEPS}
            assert done is not None and done[0] == "json"
            assert json.loads(done[1])["text"] == "an answer from before"
            assert usage == (3,)
            works_on(upgraded, run[2])
        finally:
            upgraded.close()
        new = server.database(fresh)
        new.close()
        with server.connect(old) as a, server.connect(fresh) as b:
            was, now = catalog(a), catalog(b)
        for part in now:  # part by part, so a failure names what differs
            assert was[part] == now[part], part
    finally:
        for name in (old, fresh):
            server.drop(name)


def works_on(db: Database, proposal: dict[str, Any]) -> None:
    """The app on the upgraded database: tokens, the files API, the old proposal approved and
    its run resumed, a new run that loads the old memory and skill."""
    assert principal_for(db, OWNER) == Principal(TENANT, "owner")
    assert {t.role for t in list_tokens(db, TENANT)} == {"owner", "member"}
    url, stop = serve_in_thread(create_app(db))
    try:
        with httpx.Client(base_url=url + "/v1/agents/a1", timeout=60,
                          headers={"Authorization": f"Bearer {OWNER}"}) as client:
            got = client.get("/files/memories/AGENTS.md")
            assert (got.status_code, got.text, got.headers["etag"]) == (
                200, "Answer in French.\n", '"3"')
            assert client.put("/files/notes/new.md", content="new").status_code == 201
            assert client.get("/files/notes/new.md").text == "new"
            assert client.get("/runs/old-done").json()["status"] == "done"
            pending = client.get("/proposals").json()["proposals"]
            assert [p["proposal_id"] for p in pending] == [proposal["proposal_id"]]
            approved = client.post(f"/proposals/{proposal['proposal_id']}/approve", json={})
            assert approved.status_code == 200, approved.text
    finally:
        stop()
    resumed = Agent(db, TENANT, "a1", SimulatedModel(policy=["noted"])).resume(proposal["run_id"])
    assert (resumed.status, resumed.text) == ("done", "noted")
    files = PostgresBackend(db, TENANT, "a1")
    assert files.read("/memories/AGENTS.md").content.endswith("The user prefers tea.\n")
    fresh_run = Agent(db, TENANT, "a1", SimulatedModel(policy=["ok"])).run("hello")
    system = "".join(b.text for b in fresh_run.requests[0].system)
    assert "The user prefers tea." in system and "- pdf" in system


@pytest.mark.parametrize("release", RELEASES)
def test_a_database_of_an_earlier_release_is_upgraded_in_place(embedded: Server, db: Database,
                                                              release: str) -> None:
    upgrade_and_check(embedded, db, release)


@pytest.mark.parametrize("release", RELEASES)
def test_the_upgrade_runs_where_the_owner_is_not_a_superuser(managed: Server, db: Database,
                                                             release: str) -> None:
    upgrade_and_check(managed, db, release)


def test_a_database_newer_than_the_code_is_refused(embedded: Server) -> None:
    name = embedded.create("hango_up_newer_" + uuid.uuid4().hex[:6])
    try:
        embedded.database(name).close()
        with embedded.connect(name) as conn:
            conn.execute("INSERT INTO hango_schema_steps (step) VALUES ('from-a-newer-hango')")
            conn.execute("UPDATE hango_schema SET version = 'a newer one'")
        with pytest.raises(DatabaseError, match=r"set up by a newer hango: it has the schema "
                           r"step.s. from-a-newer-hango, which this hango does not know"):
            embedded.database(name)
        with embedded.connect(name) as conn:  # nothing was changed
            assert conn.execute("SELECT version FROM hango_schema").fetchone() == ("a newer one",)
    finally:
        embedded.drop(name)


@pytest.mark.parametrize(("shape", "said"), [
    ("ALTER TABLE agent_files DROP COLUMN skill_head",
     f"older than release {BASELINE}, the oldest this one upgrades .it lacks "
     r"agent_files.skill_head\). Upgrade it in two hops"),
    ("DROP TABLE hango_schema",
     "has hango's tables .agent_files, agents, api_tokens, tenants. but no hango_schema row"),
])
def test_a_database_of_unknown_shape_is_refused(embedded: Server, shape: str, said: str) -> None:
    name = embedded.create("hango_up_unknown_" + uuid.uuid4().hex[:6])
    try:
        with embedded.connect(name) as conn:
            apply_release(conn, BASELINE)
            conn.execute(shape)
        with pytest.raises(DatabaseError, match=said) as info:
            embedded.database(name)
        assert "nothing was changed" in str(info.value)
        with embedded.connect(name) as conn:
            assert conn.execute("SELECT to_regclass('hango_schema_steps')").fetchone() == (None,)
    finally:
        embedded.drop(name)
