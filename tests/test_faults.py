"""The database stops in the middle of a run and of an API write (on a server of its own): a clear
`database unavailable` error or 503, nothing half-written, and the same pool works again after a
restart.

The database stops in the middle of a run and in the middle of an API write.

These tests start their OWN embedded PostgreSQL server in a temporary data folder (database
``faults``; outside pytest's temporary root, see ``server_dir`` in conftest.py), so stopping it
never disturbs the shared server the other tests use. The server is
stopped with ``pg_ctl stop -m fast`` (which terminates the sessions in flight, as a crash or an
operator would) and started again the way the wheel starts it.

What must hold, every time:

- the caller gets a clear error: :class:`hango.db.DatabaseError` ``database unavailable: ...``
  from ``Agent.run``, HTTP 503 with ``{"detail": "database unavailable: ..."}`` from the API;
- nothing is half-written: the file has its old content and version (a transaction killed in
  flight is rolled back by PostgreSQL; the backend never writes in two transactions);
- after a restart the same ``Database`` (same pool) and the same API server work again.

"In the middle" is made exact, not left to timing: the write is made to wait on a row lock held
by another session, the test sees it waiting in ``pg_stat_activity``, and only then stops the
server, so the kill always lands inside the write's transaction.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database, DatabaseError, EmbeddedServer
from hango.fs.backend import PostgresBackend
from hango.models.base import Request
from hango.models.simulated import Reply, SimulatedModel, tool_call
from hango.settings import load_settings

NOTE = "/notes/state.md"
DOWN_TIMEOUT = 1.0  # while the server is down, a request reports the outage after this long
OUTAGE = float(os.environ.get("HANGO_FAULTS_OUTAGE", "9"))  # seconds, for the longer outage
UP_TIMEOUT = 5.0  # after a restart, hango's own pool timeout (db.py): the next request must work
SLOW = 300  # seconds: a bound for waits that are quick on an idle machine, slow on a loaded one


class Server:
    """The dedicated server: stop it, start it, see who waits on a lock."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.data_dir: Path = db.data_dir

    def stop(self) -> None:
        self.db.pool.timeout = DOWN_TIMEOUT  # only so that the tests are quick
        # -t: under heavy load the shutdown checkpoint may take longer than pg_ctl's default 60 s
        EmbeddedServer.pg_ctl(self.data_dir, "stop", "-m", "fast", "-t", str(SLOW))

    def start(self, wait_for_pool: bool = True) -> None:
        """Start the server again; by default also wait (however long a loaded machine takes)
        until the pool hands out a connection. Only the promptness test measures that wait."""
        uri = self.uri
        server = EmbeddedServer.get(self.data_dir)
        deadline = time.monotonic() + SLOW
        with server._lock:  # the wheel's own start: same socket folder, so the same URI
            while True:
                try:
                    server.ensure_postgres_running()
                    break
                except subprocess.TimeoutExpired:
                    # the wheel gives pg_ctl start 10 s; the server it launched keeps starting
                    assert time.monotonic() < deadline, "the server did not start"
                    time.sleep(0.5)
        assert self.uri == uri
        if wait_for_pool:
            with self.db.pool.connection(timeout=SLOW):
                pass
        self.db.pool.timeout = UP_TIMEOUT

    @property
    def uri(self) -> str:
        return str(EmbeddedServer.get(self.data_dir).get_uri())

    def running(self) -> bool:
        try:
            with psycopg.connect(self.db.admin_conninfo, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def wait_for_lock_waiter(self, blocker: psycopg.Connection[Any] | None = None,
                             timeout: float = SLOW) -> None:
        """Block until a session of this database waits on a lock (held by ``blocker``'s
        session, if given: then it is exactly the write the test is about, not some other
        waiter such as an autovacuum worker)."""
        deadline = time.monotonic() + timeout
        query = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                 " AND wait_event_type = 'Lock'")
        if blocker is not None:
            query += f" AND {blocker.info.backend_pid} = ANY (pg_blocking_pids(pid))"
        with psycopg.connect(self.db.admin_conninfo, autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute(query).fetchone()
                if row and row[0] > 0:
                    return
                time.sleep(0.01)
        raise AssertionError(f"no session started waiting on the lock in {timeout} s")


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    data_dir = server_dir
    # database_url=None: always the embedded server, even where HANGO_DATABASE_URL is set
    db = Database(load_settings(data_dir=data_dir, database_name="faults", database_url=None))
    assert db.pool.timeout == UP_TIMEOUT
    srv = Server(db)
    try:
        yield srv
    finally:
        db.close()
        if srv.running():
            srv.stop()
        # stopped by us: the wheel's exit hook has nothing left to stop (and would complain)
        EmbeddedServer.get(data_dir).cleanup_mode = None


@pytest.fixture
def world(server: Server) -> Iterator[tuple[Database, str]]:
    if not server.running():  # a failed test must not leave the next one without a server
        server.start()
    tenant = create_tenant(server.db, "f-" + uuid.uuid4().hex[:12])
    save_agent(server.db, tenant, "a1", AgentConfig())
    PostgresBackend(server.db, tenant, "a1").write(NOTE, "old")
    yield server.db, tenant
    if not server.running():
        server.start()


def state(db: Database, tenant: str) -> tuple[str, int]:
    data = PostgresBackend(db, tenant, "a1").read(NOTE)
    return data.content, data.version


def stopping_then(server: Server, reply: list[Any]) -> Callable[[Request], Reply]:
    """A model turn that stops the database, then asks for ``reply``'s tool calls."""
    def policy(request: Request) -> Reply:
        server.stop()
        return Reply("", tuple(reply))
    return policy


# --- a run ------------------------------------------------------------------------------------


def test_database_stops_between_two_steps_of_a_run(server: Server,
                                                   world: tuple[Database, str]) -> None:
    db, tenant = world
    model = SimulatedModel(policy=[
        [tool_call("read_file", {"path": NOTE})],  # works: the database is up
        stopping_then(server, [tool_call("write_file", {"path": NOTE, "content": "new"})]),
        "unreachable",
    ])
    started = time.monotonic()
    with pytest.raises(DatabaseError, match=r"^database unavailable: ") as info:
        Agent(db, tenant, "a1", model).run("update the note")
    assert time.monotonic() - started < DOWN_TIMEOUT + 10
    assert "Traceback" not in str(info.value)
    server.start()
    assert state(db, tenant) == ("old", 1)  # nothing was written
    after = Agent(db, tenant, "a1", SimulatedModel(policy=[
        [tool_call("write_file", {"path": NOTE, "content": "new"})], "done"])).run("again")
    assert after.stop_reason == "final" and after.text == "done"
    assert state(db, tenant) == ("new", 2)


def test_database_stops_inside_a_tools_transaction(server: Server,
                                                   world: tuple[Database, str]) -> None:
    """The kill lands while the tool's UPDATE waits on a row lock, inside its transaction."""
    db, tenant = world
    blocker = psycopg.connect(db.admin_conninfo)
    blocker.execute("SELECT 1 FROM agent_files WHERE tenant_id = %s AND path = %s FOR UPDATE",
                    [tenant, NOTE])
    failed: list[BaseException] = []

    def kill_when_waiting() -> None:
        try:
            server.wait_for_lock_waiter(blocker)
            server.stop()
        except BaseException as exc:  # seen by the test below, never lost in this thread
            failed.append(exc)
            blocker.cancel_safe()  # and the run must not wait on the lock for ever
            blocker.close()

    # Under load every step may be slow, so nothing here is bounded by a short timeout: the
    # killer stops the server only once the edit waits on the blocker's lock, and the test
    # goes on only once the killer is done (pg_ctl stop returned: the server is down). Before,
    # killer.join(timeout=30) could return while pg_ctl was still stopping the server: start()
    # then found the old postmaster shutting down, and the killer's late pool.timeout = 1 s
    # could land after start() had restored it; a failed wait was lost in the thread.
    killer = threading.Thread(target=kill_when_waiting)
    killer.start()
    model = SimulatedModel(policy=[
        [tool_call("edit_file", {"path": NOTE, "old_string": "old", "new_string": "new"})],
        "unreachable"])
    outcome: BaseException | None = None
    try:
        Agent(db, tenant, "a1", model).run("edit the note")
    except DatabaseError as exc:
        outcome = exc
    finally:
        killer.join(timeout=3 * SLOW)
        blocker.close()
    assert not killer.is_alive(), "the killer thread did not finish"
    if failed:  # the killer's own failure first: it explains a run that then went through
        raise failed[0]
    assert outcome is not None and str(outcome).startswith("database unavailable: "), outcome
    assert not server.running()
    server.start()
    assert state(db, tenant) == ("old", 1)  # the edit's transaction was rolled back whole
    result = Agent(db, tenant, "a1", SimulatedModel(policy=[
        [tool_call("edit_file", {"path": NOTE, "old_string": "old", "new_string": "new"})],
        "done"])).run("edit the note")
    assert result.text == "done"
    assert state(db, tenant) == ("new", 2)


def test_another_pytest_session_does_not_cut_the_server_off(
    server: Server, world: tuple[Database, str], tmp_path: Path
) -> None:
    """The tools-transaction test failed once "under heavy load", that is while
    other pytest sessions ran on the machine. Starting one resets pytest's temporary root to
    mode 0700 (and prunes old session folders); the server's data folder lay under it, so the
    next ``pg_ctl stop``/``start``, run as the server's user, failed: Permission denied."""
    (tmp_path / "test_other.py").write_text("def test_uses_tmp_path(tmp_path):\n    pass\n")
    other = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-p", "no:randomly", str(tmp_path / "test_other.py")],
                           capture_output=True, text=True, timeout=SLOW, cwd=tmp_path)
    assert other.returncode == 0, other.stdout + other.stderr
    db, tenant = world
    server.stop()
    server.start()
    assert state(db, tenant) == ("old", 1)


def test_a_run_that_starts_while_the_database_is_down(server: Server,
                                                      world: tuple[Database, str]) -> None:
    db, tenant = world
    config = AgentConfig()  # given: the run must fail in before_run, not in load_config
    server.stop()
    with pytest.raises(DatabaseError, match=r"^database unavailable: "):
        Agent(db, tenant, "a1", SimulatedModel(), config=config).run("hi")
    server.start()
    assert Agent(db, tenant, "a1", SimulatedModel()).run("hi").stop_reason == "final"


def test_the_pool_recovers_after_a_restart(server: Server, world: tuple[Database, str]) -> None:
    """Idle pooled connections die with the server; each is checked before it is handed out
    (``check=ConnectionPool.check_connection``), so none reaches a caller after the restart."""
    db, tenant = world
    with ExitStack() as stack:  # fill the pool with idle connections
        for _ in range(db.pool.max_size):
            stack.enter_context(db.pool.connection())
    assert db.pool.get_stats()["pool_available"] == db.pool.max_size
    server.stop()
    server.start(wait_for_pool=False)  # the reads below are the first to meet the pool
    backend = PostgresBackend(db, tenant, "a1")
    for _ in range(10):  # more reads than there were idle (now dead) connections
        assert backend.read(NOTE).content == "old"


def test_the_pool_recovers_promptly_after_a_longer_outage(
    server: Server, world: tuple[Database, str]
) -> None:
    """Requests keep failing for ``OUTAGE`` s (as an API under traffic would see), then the server is
    back: the very next request must get a connection within the pool's timeout. The pool
    reconnects with exponential backoff (1, 2, 4, 8 s ...); unless its attempts give up and
    start over (``reconnect_timeout``), the next attempt may be many seconds after the server
    is back, and every request until then fails although the database is up."""
    db, tenant = world
    backend = PostgresBackend(db, tenant, "a1")
    server.stop()
    failures = 0
    until = time.monotonic() + OUTAGE
    while time.monotonic() < until:
        with pytest.raises(DatabaseError):
            backend.read(NOTE)
        failures += 1
    server.start(wait_for_pool=False)
    started = time.monotonic()
    assert backend.read(NOTE).content == "old"
    took = time.monotonic() - started
    print(f"\n{failures} failed requests in the outage; the first one after the restart took "
          f"{took:.2f} s")
    assert took < 3.0  # the next reconnection attempt is at most ~2 s away


# --- the files API ----------------------------------------------------------------------------


@pytest.fixture
def api(server: Server, world: tuple[Database, str]) -> Iterator[tuple[httpx.Client, str]]:
    db, tenant = world
    # A server of its own, over this module's own PostgreSQL, which the tests stop and start.
    url, stop = serve_in_thread(create_app(db))
    token = create_token(db, tenant, "owner")
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=30) as client:
        yield client, tenant
    stop()


URL = f"/v1/agents/a1/files{NOTE}"


def test_api_write_while_the_database_is_down_is_503(
    server: Server, world: tuple[Database, str], api: tuple[httpx.Client, str]
) -> None:
    db, tenant = world
    client, _ = api
    assert client.get(URL).text == "old"
    server.stop()
    for response in (client.put(URL, content="new"), client.get(URL),
                     client.patch(URL, json={"old": "old", "new": "new"})):
        assert response.status_code == 503, response.text
        assert response.json()["detail"].startswith("database unavailable: ")
        assert "\n" not in response.json()["detail"]  # libpq's and PostgreSQL's further lines
        assert response.headers["Retry-After"]
    server.start()
    assert state(db, tenant) == ("old", 1)
    put = client.put(URL, content="new", headers={"If-Match": '"1"'})
    assert put.status_code == 200 and put.headers["ETag"] == '"2"'
    assert client.get(URL).text == "new"  # the plain GET's own pool (on the loop) recovers too


def test_api_write_killed_in_flight_is_503_and_rolled_back(
    server: Server, world: tuple[Database, str], api: tuple[httpx.Client, str]
) -> None:
    db, tenant = world
    client, _ = api
    blocker = psycopg.connect(db.admin_conninfo)
    blocker.execute("SELECT 1 FROM agent_files WHERE tenant_id = %s AND path = %s FOR UPDATE",
                    [tenant, NOTE])
    responses: list[httpx.Response] = []
    writer = threading.Thread(target=lambda: responses.append(
        client.put(URL, content="x" * 100_000)))
    writer.start()
    try:
        server.wait_for_lock_waiter(blocker)  # the PUT's INSERT ... ON CONFLICT waits on it
        server.stop()
        writer.join(timeout=30)
    finally:
        blocker.close()
    (response,) = responses
    server.start()
    got = client.get(URL)
    if response.status_code == 200:
        # The shutdown ended the blocker first and the waiting write committed before its own
        # backend was told to stop (PostgreSQL finishes a commit it has begun). Then the answer
        # and the data must agree: the whole write is there, once.
        assert response.json() == {"path": NOTE, "version": 2}
        assert got.text == "x" * 100_000 and got.headers["ETag"] == '"2"'
        return
    assert response.status_code == 503, response.text
    assert response.json()["detail"].startswith("database unavailable: ")
    assert "\n" not in response.json()["detail"]
    assert got.status_code == 200 and got.text == "old" and got.headers["ETag"] == '"1"'
    assert client.put(URL, content="new").json() == {"path": NOTE, "version": 2}
    assert state(db, tenant) == ("new", 2)


def test_a_pool_with_no_free_connection_says_so_within_its_timeout(db: Database,
                                                                   tenant: str) -> None:
    """Every connection of the pool busy: the next transaction waits its timeout, then fails
    with a message naming the pool, its size and the settings, instead of hanging."""
    small = Database(load_settings(database_url=db.settings.database_url,
                                   database_name=db.settings.database_name, data_dir=db.data_dir,
                                   database_pool_size=1, database_pool_timeout=1))
    try:
        with small.tenant(tenant):
            started = time.monotonic()
            with pytest.raises(DatabaseError) as info, small.tenant(tenant):
                pass
            assert time.monotonic() - started < 30  # not a hang (the bound is 1 s)
        message = str(info.value)
        assert message.startswith("database unavailable: no connection from the pool 'hango' "
                                  "(HANGO_DATABASE_POOL_SIZE=1) within its timeout "
                                  "(HANGO_DATABASE_POOL_TIMEOUT)"), message
        with small.tenant(tenant) as conn:  # free again
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        small.close()
