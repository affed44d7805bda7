"""hango through PgBouncer, in transaction and in session pooling mode, on Debian's PostgreSQL;
and two servers on one database.

A team that outgrows the embedded server puts hango on a managed PostgreSQL, usually behind a
pooler. This module starts Debian's PostgreSQL (a role as a provider gives one: ``CREATEROLE``,
owner of its database, no superuser) with PgBouncer in front, exposing only the application's
databases (tests/pgbouncer_stack.py), and checks what must hold there:

- every transaction of the app runs as ``hango_app`` and every admin transaction as the owner,
  each seeing only its tenant with no WHERE clause, from many threads at once; a plain client
  of the pooler never inherits the app's role (the isolation probe);
- prepared statements collide behind a transaction pooler, and ``HANGO_DATABASE_POOLER`` turns
  them off; the errors they give name the setting;
- the URL's database is the database; ``postgres`` is contacted only to create a missing one;
- the suite's backend, API, memory, skills, proposals and seed-criteria tests pass through the
  pooler in both modes (a subprocess each);
- two server processes on one database behave as one (this one also runs on the embedded
  server, so it never skips).

Skipped, with the reason, where Debian's ``postgresql`` and ``pgbouncer`` are not installed
(``.ci/run`` installs them).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pgbouncer_stack
import psycopg
import pytest
from test_proposals import MEMORY, do, write

from hango import prompts
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, create_token, save_agent, token_digest
from hango.api.plain_get import read_row
from hango.db import APP_ROLE, Database, DatabaseError, DatabaseRefused
from hango.fs.backend import PostgresBackend
from hango.fs.files import ReadFiles
from hango.models.simulated import SimulatedModel, tool_call
from hango.perf.agent import prefetch
from hango.perf.backend import OneTripBackend
from hango.perf.gated import gated as gated_read
from hango.perf.gated import read_if_changed
from hango.room import record_check
from hango.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
HANGO = str(Path(sys.executable).with_name("hango"))
MISSING = pgbouncer_stack.missing()
needs_pgbouncer = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
# Every table under row-level security, and a query that counts, with no WHERE clause, the
# rows of each that belong to another tenant than ``%(me)s``.
TENANT_TABLES = ("tenants", "agents", "agent_files", "tenant_usage", "agent_changes",
                 "agent_skill_deletions", "runs", "proposals", "run_calls",
                 "agent_file_versions", "run_prompts", "learner_checks")
FOREIGN = "SELECT current_user, " + " + ".join(
    f"(SELECT count(*) FROM {t} WHERE tenant_id <> %(me)s)" for t in TENANT_TABLES) + \
    ", (SELECT count(*) FROM agent_files)"


@pytest.fixture(scope="module")
def stack() -> Iterator[pgbouncer_stack.Stack]:
    if MISSING is not None:
        pytest.skip(MISSING)
    running = pgbouncer_stack.start()
    yield running
    running.stop()


def pooled(stack: pgbouncer_stack.Stack, mode: str, **settings: Any) -> Database:
    """hango through the pooler's ``mode`` database, its URL as given (no HANGO_DATABASE_NAME)."""
    return Database(load_settings(**{"database_url": stack.url(mode), "database_name": None,
                                     "database_pooler": mode, **settings}))


def _tenant_with_every_kind_of_row(db: Database) -> tuple[str, str]:
    """A tenant with rows in every table under RLS (files, an earlier version, a run, its
    prompt, a proposal); its token."""
    tenant = create_tenant(db, "iso-" + uuid.uuid4().hex[:10])
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask"))
    files = PostgresBackend(db, tenant, "a1")
    files.write("/memories/AGENTS.md", "- earlier\n")
    files.write("/memories/AGENTS.md", f"- {tenant}\n")  # the first kept in its history
    result = Agent(db, tenant, "a1", SimulatedModel(policy=[
        [tool_call("write_file", {"path": "/memories/AGENTS.md", "content": "- more\n"})],
        "done"])).run("remember", record=True)
    assert result.status == "interrupted"  # a run row and a pending proposal
    prompts.store(db, tenant, result.run_id, result.requests, result.responses, 10_000)
    record_check(db, tenant, "00.1", True, "a check of the room view")
    return tenant, create_token(db, tenant, "owner")


@needs_pgbouncer
@pytest.mark.parametrize("mode", pgbouncer_stack.MODES)
def test_isolation_probe_every_role_sees_only_its_tenant(stack: pgbouncer_stack.Stack,
                                                         mode: str) -> None:
    """8 threads x 24 transactions of four kinds, two tenants, no WHERE clause: each kind runs
    as its role and sees 0 foreign rows; then plain clients of the pooler run as the URL's role
    (never ``hango_app``) and, as the owner with no tenant set, see no tenant's rows at all."""
    db = pooled(stack, mode)
    try:
        tenants = [_tenant_with_every_kind_of_row(db) for _ in range(2)]
        seen: collections.Counter[tuple[str, str, int]] = collections.Counter()
        errors: list[str] = []

        def app(me: str, token: str) -> tuple[str, int]:
            with db.tenant(me) as conn:
                user, foreign, _ = conn.execute(FOREIGN, {"me": me}).fetchone()  # type: ignore[misc]
            return user, foreign

        def owner(me: str, token: str) -> tuple[str, int]:
            with db.admin(me) as conn:
                user, foreign, _ = conn.execute(FOREIGN, {"me": me}).fetchone()  # type: ignore[misc]
            return user, foreign

        def gated(me: str, token: str) -> tuple[str, int]:
            backend = PostgresBackend(db, me, "a1")
            [(_, rows)] = read_if_changed(backend, [gated_read(
                ReadFiles(("/memories/AGENTS.md",), 1000), backend.ns(), None)])
            assert rows is not None and [r.content for r in rows] == [f"- {me}\n"]
            # ... and a read_file's one round trip, and a run's config with its reads
            assert OneTripBackend(backend).read("/memories/AGENTS.md").content == f"- {me}\n"
            found = prefetch(db, me, "a1", "refuse")
            assert found is not None and found[0].tools
            return APP_ROLE, 0  # its rows are its own; the plain clients below see its role

        def plain_get(me: str, token: str) -> tuple[str, int]:
            row = read_row(db, [token_digest(token), "a1", "/memories/AGENTS.md", 1000])
            assert row is not None and row[0] == me and bytes(row[2]) == f"- {me}\n".encode()
            return APP_ROLE, 0

        kinds: dict[str, Callable[[str, str], tuple[str, int]]] = {
            "app": app, "owner": owner, "gated": gated, "plain_get": plain_get}

        def worker(i: int) -> None:
            me, token = tenants[i % 2]
            for j in range(24):
                kind = list(kinds)[j % len(kinds)]
                try:
                    user, foreign = kinds[kind](me, token)
                    seen[(kind, user, foreign)] += 1
                except Exception as exc:  # counted: the test fails on any
                    errors.append(f"{kind}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [], errors[:5]
        assert seen == {("app", APP_ROLE, 0): 48, ("owner", pgbouncer_stack.ROLE, 0): 48,
                        ("gated", APP_ROLE, 0): 48, ("plain_get", APP_ROLE, 0): 48}, seen
        plain = collections.Counter()
        for _ in range(8):
            with psycopg.connect(stack.url(mode)) as conn:
                plain[conn.execute(FOREIGN, {"me": ""}).fetchone()] += 1
        assert plain == {(pgbouncer_stack.ROLE, 0, 0): 8}, plain
    finally:
        db.close()


@needs_pgbouncer
def test_prepared_statements_collide_behind_a_transaction_pooler_unless_turned_off(
        stack: pgbouncer_stack.Stack) -> None:
    """Two processes' worth of clients on ONE server connection (the ``tiny`` database of the
    pooler): psycopg names its prepared statements ``_pg3_0``, ``_pg3_1`` ... per client
    connection, so the second client to prepare one finds the first one's. The error says what
    to set; with ``HANGO_DATABASE_POOLER=transaction`` nothing is prepared and nothing collides."""
    url = stack.url("transaction").rsplit("/", 1)[0] + "/" + pgbouncer_stack.TINY

    def clients(pooler: str) -> list[Database]:
        return [Database(load_settings(database_url=url, database_name=None,
                                       database_pooler=pooler, database_pool_size=1))
                for _ in range(2)]

    first, second = clients("none")
    try:
        for _ in range(6):  # psycopg prepares a statement on its fifth use
            with first.app() as conn:
                conn.execute("SELECT 1")
        with pytest.raises(DatabaseRefused) as info:
            for _ in range(6):
                with second.app() as conn:
                    conn.execute("SELECT 1")
        message = str(info.value)
        assert "DuplicatePreparedStatement (42P05)" in message, message
        assert "HANGO_DATABASE_POOLER=transaction" in message and "_pg3_" not in message
    finally:
        first.close()
        second.close()
    first, second = clients("transaction")
    try:
        for db in (first, second, first, second):
            for _ in range(6):
                with db.app() as conn:
                    assert conn.execute("SELECT current_user").fetchone() == (APP_ROLE,)
    finally:
        first.close()
        second.close()


@needs_pgbouncer
def test_the_url_names_the_database_and_postgres_is_only_for_creating_it(
        stack: pgbouncer_stack.Stack) -> None:
    """The pooler exposes only the application's databases (no ``postgres``): hango starts on
    the URL's database without touching another. A database missing behind the pooler is an
    error naming what was tried (and no password); straight to the server, the owner creates
    it from ``postgres``, or is told it may not."""
    db = pooled(stack, "transaction")
    try:
        assert db.name == pgbouncer_stack.database("transaction")
        with db.app() as conn:
            assert conn.execute("SELECT current_database()").fetchone() == (db.name,)
    finally:
        db.close()
    missing = stack.url("transaction").rsplit("/", 1)[0] + "/hango_nowhere"
    with pytest.raises(DatabaseError) as info:
        Database(load_settings(database_url=missing, database_name=None))
    message = str(info.value)
    assert "'hango_nowhere' does not exist" in message, message
    assert "maintenance database at postgresql://provider:***@127.0.0.1" in message, message
    assert "no such database: postgres" in message and pgbouncer_stack.PASSWORD not in message
    with pytest.raises(DatabaseError, match="may not create it: give provider CREATEDB"):
        Database(load_settings(database_url=stack.direct_url("hango_nowhere"),
                               database_name=None))
    with psycopg.connect(stack.direct(), autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {pgbouncer_stack.ROLE} CREATEDB")
    created = Database(load_settings(database_url=stack.direct_url("hango_created"),
                                     database_name=None))
    try:
        assert created.name == "hango_created"
        tenant = create_tenant(created, "made-here")
        assert PostgresBackend(created, tenant, "a1").ls("/") == []
    finally:
        created.close()


@needs_pgbouncer
def test_db_status_and_doctor_through_the_pooler_say_the_role_and_rls(stack: pgbouncer_stack.Stack) -> None:
    db = pooled(stack, "transaction")  # set up
    with db.admin() as conn:  # the probe's tables are every table row-level security guards
        guarded = {r[0] for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
            "AND relkind = 'r' AND relrowsecurity").fetchall()}
    db.close()
    assert guarded == set(TENANT_TABLES)
    env = {**os.environ, "HANGO_DATABASE_URL": stack.url("transaction"),
           "HANGO_DATABASE_POOLER": "transaction"}
    env.pop("HANGO_DATABASE_NAME", None)
    status = subprocess.run([HANGO, "db", "status"], capture_output=True, text=True, env=env,
                            timeout=120)
    out = status.stdout
    assert status.returncode == 0, status.stdout + status.stderr
    assert re.search(r"reachable, server \d+\.\d+, database hango_transaction", out), out
    assert f"connects as: {pgbouncer_stack.ROLE} (not a superuser)" in out, out
    assert f"a transaction of the app runs as: {APP_ROLE}" in out, out
    assert f"forced on {len(TENANT_TABLES)} of {len(TENANT_TABLES)} tenant tables" in out, out
    assert "prepared statements off" in out and "at most 7 per process" in out, out
    assert pgbouncer_stack.PASSWORD not in out + status.stderr
    doctor = subprocess.run([sys.executable, "-m", "hango.doctor"], capture_output=True,
                            text=True, env=env, timeout=120).stdout
    assert "ok      database" in doctor and f"runs as {APP_ROLE}, row-level security forced" \
        in doctor and "not used: HANGO_DATABASE_URL" in doctor, doctor
    start = subprocess.run([HANGO, "db", "start"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert start.returncode == 1 and "the server is external" in start.stderr, start.stderr
    assert pgbouncer_stack.PASSWORD not in start.stderr


@needs_pgbouncer
def test_a_pooler_with_no_free_server_connection_is_named_not_a_hang() -> None:
    """Every server connection of the pooler is held (here its one, by a transaction left
    open): `hango tenant create` waits the pooler's query_wait_timeout (2 s here, PgBouncer's
    default is 120 s), then says what ran out, instead of hanging with no message."""
    stack = pgbouncer_stack.start(query_wait_timeout=2)
    try:
        pooled(stack, "transaction").close()  # set up
        url = stack.url("transaction").rsplit("/", 1)[0] + "/" + pgbouncer_stack.TINY
        env = {**os.environ, "HANGO_DATABASE_URL": url, "HANGO_DATABASE_POOLER": "transaction"}
        env.pop("HANGO_DATABASE_NAME", None)
        with psycopg.connect(url) as holder:
            holder.execute("SELECT 1")  # BEGIN, and never COMMIT: the server connection is held
            created = subprocess.run([HANGO, "tenant", "create", "late"], capture_output=True,
                                     text=True, env=env, timeout=120)
    finally:
        stack.stop()
    assert created.returncode == 1, created.stdout + created.stderr
    assert "the pooler had no free server connection for its query_wait_timeout: see the " \
        "connection budget in `hango db status`" in created.stderr, created.stderr
    assert "Traceback" not in created.stderr


# The suite's tests that go through the database's every door, run through the pooler.
SUBSET = ["tests/test_backend.py", "tests/test_api.py", "tests/test_memory.py",
          "tests/test_skills.py", "tests/test_proposals.py", "tests/test_seed_criteria.py",
          "tests/test_history.py"]


@needs_pgbouncer
@pytest.mark.parametrize("mode", pgbouncer_stack.MODES)
def test_the_database_tests_pass_through_pgbouncer(stack: pgbouncer_stack.Stack,
                                                   mode: str) -> None:
    env = {**os.environ, "HANGO_DATABASE_URL": stack.url(mode),
           "HANGO_DATABASE_NAME": pgbouncer_stack.database(mode),  # conftest's is hango_test
           "HANGO_DATABASE_POOLER": mode}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-rs", "-p", "no:randomly",
                          "-p", "no:cacheprovider", *SUBSET],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    tail = run.stdout[-3000:] + run.stderr[-2000:] + "\n" + stack.log()
    assert run.returncode == 0, tail
    assert " passed" in run.stdout and " failed" not in run.stdout, tail
    skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all("a database of its own" in line for line in skips), skips  # 1, by its design
    print(f"\nthrough PgBouncer ({mode} pooling): " + run.stdout.strip().splitlines()[-1])


# --- two servers, one database ------------------------------------------------------------------

SERVER = """
import sys
import uvicorn
sys.path.insert(0, {tests!r})
from test_proposals import policy
from hango.api.app import create_app
from hango.models.simulated import Reply, SimulatedModel

def served(request):
    if request.messages[-1].text == "memory?":  # what this run was given of its memory
        return Reply(" ".join(b.text for b in request.system if "fact" in b.text))
    return policy(request)

app = create_app()
app.state.hango_model = SimulatedModel(policy=served)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]


def _serve(env: dict[str, str]) -> Served:
    port = pgbouncer_stack._free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(tests=str(ROOT / "tests")), str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Served(f"http://127.0.0.1:{port}", process)


def _wait(server: Served) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(server.url + "/docs").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert server.process.poll() is None, server.process.communicate()
        assert time.monotonic() < deadline, "the server did not answer in 120 s"
        time.sleep(0.1)


@pytest.fixture(params=["embedded", "transaction"])
def two_servers(request: pytest.FixtureRequest, db: Database
                ) -> Iterator[tuple[Database, list[Served]]]:
    """Two server processes on one database: the embedded one (always), and the one behind
    PgBouncer in transaction mode (where it is installed)."""
    if request.param == "embedded":
        env, database, own = {**os.environ}, db, False
    else:
        if MISSING is not None:
            pytest.skip(MISSING)
        stack = request.getfixturevalue("stack")
        env = {**os.environ, "HANGO_DATABASE_URL": stack.url("transaction"),
               "HANGO_DATABASE_POOLER": "transaction"}
        env.pop("HANGO_DATABASE_NAME", None)
        database, own = pooled(stack, "transaction"), True
    servers = [_serve(env) for _ in range(2)]
    try:
        for server in servers:
            _wait(server)
        yield database, servers
    finally:
        for server in servers:
            server.process.terminate()
            server.process.communicate(timeout=30)
        if own:
            database.close()


def test_two_servers_on_one_database_behave_as_one(
        two_servers: tuple[Database, list[Served]]) -> None:
    """A write through one server is in the very next run on the other, 10 of 10 times; a run
    interrupted on one, approved on the other, resumed on the first, 3 of 3 times; then 8
    threads of PUT, GET and runs over both servers, 0 errors."""
    db, (one, other) = two_servers
    tenant = create_tenant(db, "two-" + uuid.uuid4().hex[:10])
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask"))
    auth = {"Authorization": f"Bearer {create_token(db, tenant, 'owner')}"}
    agent = "/v1/agents/a1"
    with httpx.Client(base_url=one.url + agent, headers=auth, timeout=60) as a, \
            httpx.Client(base_url=other.url + agent, headers=auth, timeout=60) as b:
        for i in range(10):
            writer, reader = (a, b) if i % 2 == 0 else (b, a)
            put = writer.put("/files" + MEMORY, content=f"- fact {i}\n")
            assert put.status_code in (200, 201), put.text
            assert reader.get("/files" + MEMORY).text == f"- fact {i}\n"
            run = reader.post("/runs", json={"prompt": "memory?"})
            assert run.status_code == 201 and f"- fact {i}" in run.json()["text"], run.text
        for i in range(3):
            proposed = a.post("/runs", json={"prompt": do(write(MEMORY, f"- kept {i}\n"))})
            out = proposed.json()
            assert proposed.status_code == 201 and out["status"] == "interrupted", proposed.text
            approved = b.post(f"/proposals/{out['proposal']['proposal_id']}/approve", json={})
            assert approved.status_code == 200, approved.text
            resumed = a.post(f"/runs/{out['run_id']}/resume")
            assert resumed.status_code == 200 and resumed.json()["status"] == "done", resumed.text
            assert b.get("/files" + MEMORY).text == f"- kept {i}\n"
    failures: list[str] = []

    def load(i: int) -> None:
        base = (one, other)[i % 2].url + agent
        with httpx.Client(base_url=base, headers=auth, timeout=60) as client:
            for j in range(6):
                path = f"/files/notes/{i}-{j}.md"
                for response in (client.put(path, content=f"{i} {j}"), client.get(path),
                                 client.post("/runs", json={"prompt": f"hello {i} {j}"})):
                    if response.status_code not in (200, 201):
                        failures.append(f"{response.request.method} {response.request.url}: "
                                        f"{response.status_code} {response.text[:200]}")

    threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [], failures[:5]
