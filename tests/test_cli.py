"""`hango tenant/token/agent create` (refusing an existing agent), `hango agent set` (only the flags
given), the base prompt's length, errors that name the input, usage errors exit 2, `hango serve`
answers over HTTP, with two worker processes too (files and runs; SIGTERM stops both), a bad worker
count named (`--workers`, `HANGO_WORKERS`, `--metrics` with several), `hango db
status/url/start/stop`.

The ``hango`` command, run as a learner runs it: the venv's executable, in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from hango.agent.base_prompt import BASE_PROMPT
from hango.agents import AgentConfig, load_agent, principal_for
from hango.db import Database
from hango.models.simulated import BLOCK_OVERHEAD, count_tokens, min_cacheable_tokens

HANGO = str(Path(sys.executable).with_name("hango"))


def hango(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HANGO, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_tenant_token_and_agent(db: Database) -> None:
    name = "cli-" + uuid.uuid4().hex[:10]
    created = hango("tenant", "create", name)
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == name

    token = hango("token", "create", name, "--role", "admin")
    assert token.returncode == 0, token.stderr
    principal = principal_for(db, token.stdout.strip())
    assert principal is not None and (principal.tenant_id, principal.role) == (name, "admin")

    agent = hango("agent", "create", name, "helper", "--tools", "read_file,ls", "glob",
                  "--memory", "/memories/AGENTS.md", "--skills", "/skills/team")
    assert agent.returncode == 0, agent.stderr
    assert json.loads(agent.stdout)["skills"] == ["/skills/team/"]
    saved = load_agent(db, name, "helper")
    assert saved is not None and saved.tools == ["read_file", "ls", "glob"]
    assert saved.memory == ["/memories/AGENTS.md"]


def test_agent_create_refuses_an_existing_agent_and_set_changes_only_what_it_names(
        db: Database, tenant: str) -> None:
    made = hango("agent", "create", tenant, "a1", "--tools", "read_file", "ls", "--memory",
                 "/memories/team.md", "--reserved-writes", "ask")
    assert made.returncode == 0, made.stderr
    before = load_agent(db, tenant, "a1")
    assert before is not None and before.system_prompt == BASE_PROMPT
    again = hango("agent", "create", tenant, "a1", "--skills", "/skills/team")
    assert again.returncode == 1 and f"agent 'a1' in tenant {tenant!r} already exists; nothing " \
        f"was changed" in again.stderr and f"hango agent set {tenant} a1" in again.stderr
    assert load_agent(db, tenant, "a1") == before  # the earlier --tools and --memory are kept
    changed = hango("agent", "set", tenant, "a1", "--skills", "/skills/team", "--system-prompt",
                    "Be brief.")
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["skills"] == ["/skills/team/"]
    assert load_agent(db, tenant, "a1") == before.model_copy(update={
        "skills": ["/skills/team/"], "system_prompt": "Be brief."})
    for args, message in ((("agent", "set", tenant, "a1"), "nothing to change"),
                          (("agent", "set", tenant, "nobody", "--tools", "ls"),
                           f"no agent 'nobody' in tenant {tenant!r}: create it with"),
                          (("agent", "set", tenant, "a1", "--subagents", "a1"),
                           "subagents[0] 'a1' is this agent itself")):
        refused = hango(*args)
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
    assert load_agent(db, tenant, "a1") == before.model_copy(update={
        "skills": ["/skills/team/"], "system_prompt": "Be brief."})
    lead = hango("agent", "create", tenant, "lead", "--subagents", "a1")
    assert json.loads(lead.stdout)["tools"] == [*AgentConfig().tools, "task"]


def test_the_base_prompt_of_a_new_agent_is_long_enough_to_be_cached() -> None:
    """hango-sim-1 caches no prefix under 1,024 tokens: the base prompt reaches it by itself,
    whatever the allowlist adds."""
    assert count_tokens(BASE_PROMPT) + BLOCK_OVERHEAD >= min_cacheable_tokens("hango-sim-1")


def test_token_expiry_list_and_revoke(db: Database, tenant: str) -> None:
    """``--expires``, ``hango token list`` (never the secret), ``hango token revoke``."""
    created = hango("token", "create", tenant, "--role", "member", "--label", "ci bot",
                    "--expires", "30d")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert "\n" not in secret and "token id " in created.stderr  # stdout: the token alone
    token_id = created.stderr.split("token id ")[1].split(",")[0]
    forever = hango("token", "create", tenant, "--role", "owner").stdout.strip()

    listed = hango("token", "list", tenant)
    assert listed.returncode == 0, listed.stderr
    header, *rows = [line.split("\t") for line in listed.stdout.strip().splitlines()]
    assert header == ["id", "role", "label", "created", "last_used", "expires"]
    assert len(rows) == 2 and secret not in listed.stdout and forever not in listed.stdout
    (mine,) = [r for r in rows if r[0] == token_id]
    assert mine[1:3] == ["member", "ci bot"] and mine[4] == "never"
    lifetime = datetime.fromisoformat(mine[5]) - datetime.fromisoformat(mine[3])
    assert timedelta(days=29) < lifetime <= timedelta(days=30)

    assert principal_for(db, secret) is not None
    assert principal_for(db, forever) is not None
    revoked = hango("token", "revoke", token_id)
    assert revoked.returncode == 0 and f"revoked token {token_id} of tenant {tenant}" in \
        revoked.stdout
    assert principal_for(db, secret) is None  # 401 from the next request on
    assert principal_for(db, forever) is not None
    again = hango("token", "revoke", token_id)
    assert again.returncode == 1 and "no token with id" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("agent", "create", "{t}", "bad", "--memory", "/notes/x"),
         "memory[0] '/notes/x': must be under /memories/"),
        (("agent", "create", "{t}", "bad", "--skills", "/skills/../memories"),
         "skills[0] '/skills/../memories'"),
        (("agent", "create", "{t}", "bad", "--tools", "rm -rf"), "'rm -rf' is not a tool name"),
        (("agent", "create", "no-such-tenant", "x"), "no tenant 'no-such-tenant'"),
        (("token", "create", "no-such-tenant", "--role", "owner"), "hango tenant create"),
        (("tenant", "create", "Bad Name"), "tenant id 'Bad Name' must match"),
        (("token", "create", "{t}", "--role", "owner", "--expires", "soon"),
         "expiry 'soon' is neither a duration"),
        (("token", "create", "{t}", "--role", "owner", "--expires", "2001-01-01"),
         "is not in the future"),
        (("token", "list", "no-such-tenant"), "no tenant 'no-such-tenant'"),
        (("agent", "create", "{t}", "Bad\n"), "agent id 'Bad\\n' must match"),
    ],
)
def test_errors_name_the_bad_input(tenant: str, args: tuple[str, ...], message: str) -> None:
    result = hango(*(a.format(t=tenant) for a in args))
    assert result.returncode == 1
    assert result.stderr.startswith("hango: error: ")
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("name", "value"), [
    ("HANGO_MEMORY_DEFAULT_SOURCES", "/memories/../notes/x.md"),
    ("HANGO_SKILLS_DEFAULT_SOURCES", "/skills/team\u200b/"),
])
def test_a_default_source_breaking_a_path_rule_stops_every_command(name: str, value: str) -> None:
    """settings.py checks the prefix only; the CLI applies the rest of the path rules at start."""
    result = hango("db", "status", env={name: value})
    assert result.returncode == 1 and result.stderr.startswith(f"hango: error: {name}[0] "), (
        result.stderr)
    assert "not allowed" in result.stderr or "invisible" in result.stderr


def test_usage_errors_exit_2() -> None:
    result = hango("token", "create", "t", "--role", "root")
    assert result.returncode == 2 and "invalid choice: 'root'" in result.stderr


def test_serve_answers_over_http(db: Database, tenant: str) -> None:
    port = _free_port()
    token = hango("token", "create", tenant, "--role", "owner").stdout.strip()
    assert hango("agent", "create", tenant, "a1").returncode == 0
    server = subprocess.Popen([HANGO, "serve", "--port", str(port), "--log-level", "warning"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/v1/agents",
                                     headers={"Authorization": f"Bearer {token}"})
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()
                assert time.monotonic() < deadline, "hango serve did not answer in 60 s"
                time.sleep(0.1)
        assert response.status_code == 200 and response.json() == {"agents": ["a1"]}
        assert httpx.get(f"http://127.0.0.1:{port}/openapi.json").status_code == 200
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr
    assert f"http://127.0.0.1:{port}" in stderr


def _workers_of(pid: int) -> list[int]:
    """The worker processes of the server ``pid`` (not multiprocessing's resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid and \
                    b"spawn_main" in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for the workers")
def test_serve_with_two_workers_answers_from_both(db: Database, tenant: str) -> None:
    """``HANGO_WORKERS=2``: two worker processes on one port; every request is answered, runs
    included, whichever worker takes it; SIGTERM stops them all."""
    port = _free_port()
    token = hango("token", "create", tenant, "--role", "owner").stdout.strip()
    assert hango("agent", "create", tenant, "a1").returncode == 0
    server = subprocess.Popen([HANGO, "serve", "--port", str(port), "--log-level", "warning"],
                              env={**os.environ, "HANGO_WORKERS": "2"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
    try:
        deadline = time.monotonic() + 60
        while len(_workers_of(server.pid)) < 2 or not _answers(url, auth):
            assert server.poll() is None, server.communicate()
            assert time.monotonic() < deadline, "hango serve --workers 2 did not answer in 60 s"
            time.sleep(0.1)
        workers = _workers_of(server.pid)
        assert len(workers) == 2, workers
        for i in range(8):  # a new connection each: the workers take turns accepting
            put = httpx.put(f"{url}/v1/agents/a1/files/memories/AGENTS.md", headers=auth,
                            content=f"- fact {i}\n")
            assert put.status_code in (200, 201), put.text
            run = httpx.post(f"{url}/v1/agents/a1/runs", headers=auth, json={"prompt": "hi"})
            assert run.status_code == 201 and run.json()["status"] == "done", run.text
            shown = httpx.get(f"{url}/v1/agents/a1/runs/{run.json()['run_id']}", headers=auth)
            assert shown.status_code == 200 and shown.json()["status"] == "done"
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr
    assert "2 worker processes" in stderr
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "a worker outlived it"


def _answers(url: str, auth: dict[str, str]) -> bool:
    try:
        return httpx.get(f"{url}/v1/agents", headers=auth).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--workers", "0"], {}, "--workers must be from 1 to 64, got 0"),
    (["--workers", "65"], {}, "--workers must be from 1 to 64, got 65"),
    ([], {"HANGO_WORKERS": "65"}, "HANGO_WORKERS: Input should be less than or equal to 64"),
    ([], {"HANGO_WORKERS": "0"}, "HANGO_WORKERS: Input should be greater than or equal to 1"),
    ([], {"HANGO_WORKERS": "two"}, "HANGO_WORKERS: Input should be a valid integer"),
    (["--workers", "2", "--metrics"], {}, "--metrics needs one worker (got --workers=2)"),
    (["--metrics"], {"HANGO_WORKERS": "2"}, "--metrics needs one worker (got HANGO_WORKERS=2)"),
])
def test_serve_refuses_a_bad_worker_count_naming_it(args: list[str], env: dict[str, str],
                                                     message: str) -> None:
    result = hango("serve", "--port", str(_free_port()), *args, env=env)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_db_status_and_url_on_the_running_server(db: Database) -> None:
    status = hango("db", "status")
    assert status.returncode == 0
    assert ("embedded PostgreSQL: running" if db.embedded else "external") in status.stdout
    url = hango("db", "url")
    assert url.returncode == 0, url.stderr
    with psycopg.connect(url.stdout.strip()) as conn:
        if not db.embedded:
            conn.execute("SET ROLE hango_app")
        row = conn.execute("SELECT current_user, current_database()").fetchone()
    assert row == ("hango_app", db.name)
    psql = hango("db", "psql", "--app", "-Atc", "SELECT current_user")
    assert psql.returncode == 0 and psql.stdout.strip() == "hango_app", psql.stderr


def test_db_status_says_what_a_transaction_runs_as(db: Database) -> None:
    """The server's version as people write it (18.1, not 180001), the role the URL logs in as,
    the role a transaction of the app runs as, row-level security forced, the budget."""
    out = hango("db", "status").stdout
    assert re.search(r"reachable, server \d+\.\d+(\.\d+)?, database " + db.name + r"\n", out), out
    assert "a transaction of the app runs as: hango_app\n" in out, out
    forced = re.search(r"row-level security: forced on (\d+) of (\d+) tenant tables", out)
    assert forced and forced[1] == forced[2] and int(forced[1]) >= 7, out
    assert "connections: at most 7 per process" in out, out


@pytest.mark.parametrize("args", [("db", "start"), ("db", "stop"), ("db", "status"),
                                  ("tenant", "create", "x"), ("token", "list", "x")])
def test_no_error_prints_the_password(args: tuple[str, ...]) -> None:
    url = f"postgresql://someone:hunter2-secret@127.0.0.1:{_free_port()}/teamdb"
    env = {**{k: v for k, v in os.environ.items() if k != "HANGO_DATABASE_NAME"},
           "HANGO_DATABASE_URL": url}  # nothing listens there
    result = subprocess.run([HANGO, *args], capture_output=True, text=True, env=env, timeout=120)
    said = result.stdout + result.stderr
    assert result.returncode == 1, said
    assert "hunter2" not in said and "postgresql://someone:***@127.0.0.1:" in said, said
    assert "/teamdb" in said and "Traceback" not in said, said
    doctor = subprocess.run([sys.executable, "-m", "hango.doctor"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert "hunter2" not in doctor.stdout + doctor.stderr
    assert "PROBLEM database: the external server at postgresql://someone:***@" in doctor.stdout
    assert "not used: HANGO_DATABASE_URL names an external server" in doctor.stdout


def test_db_start_stop_on_a_private_data_dir(server_dir: Path) -> None:
    """A server of its own (never the shared one): stopped, started, used, stopped."""
    tmp_path = server_dir  # not under pytest's tmp root (see conftest.server_dir)
    env = {"HANGO_DATA_DIR": str(tmp_path / "data"), "HANGO_DATABASE_NAME": "hango_cli"}
    if os.environ.get("HANGO_DATABASE_URL"):
        pytest.skip("HANGO_DATABASE_URL is set: there is no embedded server to start")
    status = hango("db", "status", env=env)
    assert status.returncode == 0 and "stopped" in status.stdout  # a state, not an error
    assert "not running" in hango("db", "url", env=env).stderr
    try:
        started = hango("db", "start", env=env)
        assert started.returncode == 0, started.stderr
        # a process that opens and leaves the database does not stop a started server
        assert hango("tenant", "create", "pinned", env=env).returncode == 0
        status = hango("db", "status", env=env)
        assert status.returncode == 0 and "running" in status.stdout and "pinned" in status.stdout
        url = hango("db", "url", env=env).stdout.strip()
        assert str(tmp_path) in url
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("hango_app",)
    finally:
        stopped = hango("db", "stop", env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert "stopped" in hango("db", "status", env=env).stdout


def test_the_embedded_server_stops_with_its_last_user_although_another_was_killed(
        server_dir: Path) -> None:
    """A kernel killed with SIGKILL never runs its exit handlers, so it stays in the server's
    list of users; the last process that does exit must still stop the server."""
    if os.environ.get("HANGO_DATABASE_URL"):
        pytest.skip("HANGO_DATABASE_URL is set: there is no embedded server to start")
    env = {**os.environ, "HANGO_DATA_DIR": str(server_dir / "killed"),
           "HANGO_DATABASE_NAME": "hango_cli"}
    hold = ("from hango.db import Database\nDatabase()\nprint('up', flush=True)\n"
            "import sys\nsys.stdin.read()\n")
    users: list[subprocess.Popen[str]] = []
    try:
        for _ in range(2):  # one after the other: the first creates the data folder
            users.append(subprocess.Popen([sys.executable, "-c", hold], env=env, text=True,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE))
            assert users[-1].stdout is not None and users[-1].stdout.readline() == "up\n"
        users[0].kill()  # like a kernel killed by the OS: no exit handler runs
        users[0].wait(timeout=30)
        assert "used by 1 process(es)" in hango("db", "status", env=env).stdout
        users[1].communicate("", timeout=60)  # the last user leaves normally
        assert users[1].returncode == 0
        assert "embedded PostgreSQL: stopped" in hango("db", "status", env=env).stdout
    finally:
        for user in users:
            user.kill()
        hango("db", "stop", env=env)


def test_db_sweep_sweeps_once_and_bounds_its_tenants(db: Database) -> None:
    done = hango("db", "sweep", "--tenants", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("swept ") and " tenants: deleted " in done.stdout
    refused = hango("db", "sweep", "--tenants", "0")
    assert refused.returncode != 0
    assert "--tenants must be from 1 to 100000, got 0" in refused.stderr


def test_token_labels_are_checked_and_listed_escaped(db: Database, tenant: str) -> None:
    refused = hango("token", "create", tenant, "--role", "member", "--label", "a\x1b[2Jb")
    assert refused.returncode == 1
    assert "label must not contain control characters: U+001B at position 1" in refused.stderr
    made = hango("token", "create", tenant, "--role", "owner", "--label", "ok")
    token_id = made.stderr.split("token id ")[1].split(",")[0]
    with db.admin() as conn:  # a label stored before the rule (or by SQL)
        conn.execute("UPDATE api_tokens SET label = %s WHERE token_id = %s",
                     ["x\x1b]0;owned\x07\ty\u200d", token_id])
    listed = hango("token", "list", tenant)
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    (row,) = [line.split("\t") for line in listed.stdout.splitlines() if line.startswith(token_id)]
    assert row[2] == "x\\x1b]0;owned\\x07\\ty\\u200d"
    revoked = hango("token", "revoke", token_id)
    assert revoked.returncode == 0
    assert (f"note: tenant {tenant} has no owner token now; `hango token create {tenant} "
            "--role owner` makes one") in revoked.stderr


def test_a_reader_that_leaves_early_gets_no_traceback(db: Database) -> None:
    """``hango workshop room --watch 1 | head -1``: the pipe closes while the view still writes;
    the command stops quietly (141, as a shell's own commands do), with no traceback."""
    proc = subprocess.Popen([HANGO, "workshop", "room", "--prefix", "nobody-here", "--watch", "1",
                             "--for", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ))
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # the view started writing
    proc.stdout.close()  # the reader leaves
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141 and b"Traceback" not in err, err.decode()
