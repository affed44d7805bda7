"""Generated attack paths (percent-encoded and double-encoded dots and slashes, overlong UTF-8, NUL,
backslashes, Unicode lookalikes of `.`, `/` and the reserved names) through `clean`, the backend,
the agent's tools in a real run and the files API over HTTP; after each example both tenants' rows
are compared with a snapshot: nothing escapes its namespace or the reserved-prefix rule, nothing is
a 5xx.

Paths under attack: no accepted path escapes its namespace or the reserved-prefix rule.

Four layers, each fed generated paths built from the forms an attacker tries: percent-encoded
dots and slashes (``%2e%2e``, ``%2E``, ``%2f``), double encoding (``%252e``), overlong UTF-8
(``%c0%ae``), NUL and control escapes, backslashes, and Unicode lookalikes of ``.``, ``/`` and of
the reserved names (fullwidth, Cyrillic, division slash):

1. :func:`clean` alone (the bulk of the examples);
2. the backend: a write succeeds exactly when ``clean`` accepts, and lands at exactly that path in
   exactly its namespace;
3. the agent's tools inside a real run: after every batch of ``write_file``/``edit_file`` calls the
   only rows that changed are the ones whose call succeeded, at the literal path, outside
   ``/memories/`` and ``/skills/``;
4. the files API over real HTTP (uvicorn on loopback, member and owner tokens, PUT/PATCH/DELETE):
   after every request the database differs from before by at most the one row the response
   names, at the path the URL decodes to *exactly once*, in the agent the URL names, in the
   token's tenant; a member never changes a reserved row; nothing is ever a 5xx.

After each example of layers 2-4 the whole of both tenants' rows is compared with a snapshot, so
"escapes" means any row anywhere, not only the one the test expected.

Counts, from ``HANGO_FUZZ_EXAMPLES`` = N (default 2000): 10 N seeded random paths and N/4
hypothesis examples through ``clean``; N/20 examples (at least 50) through each database layer
(the agent-tool examples are batches of up to 8 calls). A dedicated run::

    HANGO_FUZZ_EXAMPLES=100000 .venv/bin/pytest -q tests/test_fuzz_paths.py
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import posixpath
import random
import re
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlsplit

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hango.agent.runtime import Agent
from hango.agents import ID_PATTERN, AgentConfig, create_tenant, create_token, save_agent
from hango.db import Database
from hango.fs.backend import PathConflict, PostgresBackend
from hango.fs.path import (
    PREFIX_MEMORIES,
    PREFIX_SKILLS,
    PathError,
    ReservedPathError,
    check_write,
    clean,
    is_reserved,
)
from hango.models.simulated import SimulatedModel, tool_call

EXAMPLES = int(os.environ.get("HANGO_FUZZ_EXAMPLES", "2000"))
HYPOTHESIS_EXAMPLES = max(100, EXAMPLES // 4)
DB_EXAMPLES = max(50, EXAMPLES // 20)
CLEAN = settings(max_examples=HYPOTHESIS_EXAMPLES, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])
DB = settings(max_examples=DB_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- the attacker's alphabet --------------------------------------------------------------------

ENCODED = [  # as they appear in a URL; through clean() and the tools they are literal names
    "%2e", "%2E", "%2e%2e", "%2E%2E", "%2e%2E", ".%2e", "%2e.", "%2f", "%2F", "%5c", "%5C",
    "%252e", "%252e%252e", "%252f", "%25", "%c0%ae", "%c0%af", "%e0%80%ae", "%c1%9c",
    "%c0%2e", "%00", "%0a", "%0d", "%09", "%7f", "%c2%85", "%e2%80%8b", "%e2%80%ae",
    "%ef%bb%bf", "%e2%80%a8", "%ef%bc%8e", "%ef%bc%8f", "%e2%88%95", "%e2%81%84", "%e2%80%a4",
    "%ef%bd%8d", "%d1%95", "%u002e", "%uff0e", "%3f", "%23", "%3b", "%20", "+", "%",
    "%2", "%zz",
]
LOOKALIKES = [
    "\uff0e", "\uff0e\uff0e", "\u2024", "\u2025", "\u3002",  # fullwidth / leader / ideographic dots
    "\uff0f", "\u2215", "\u2044", "\u29f8", "\u2571",  # slashes that are not /
    "\uff3c", "\u2216", "\ufe68",  # backslash lookalikes
    "\uff4demories", "memori\u0435s", "\u0455kills", "skiIls", "memorіes",  # ｍ, Cyrillic е/ѕ/і
    "memories\u0307", "m\u0301emories", ".\u0338", "\u00b7\u00b7",  # combining marks, middle dots
]
NEAR = [
    "memories", "skills", "Memories", "SKILLS", "memories.", "skills~", "AGENTS.md", "SKILL.md",
    "x", "notes", "a b", "é", "日本", "😀", ".", "..", "...", "", "\\", "\\..", "..\\", "\x00",
    "\n", "\u200b", "\u202e", "\ufeff", "\u2028", "a" * 255, "é" * 128,
]
PIECE = st.sampled_from(ENCODED + LOOKALIKES + NEAR)
SEGMENT = st.one_of(
    PIECE,
    st.lists(PIECE, min_size=1, max_size=4).map("".join),
    st.text(max_size=10),
)


@st.composite
def raw_paths(draw: st.DrawFn) -> str:
    """A path string as a caller would pass it to clean(), the backend or a tool."""
    segments = draw(st.lists(SEGMENT, max_size=5))
    if draw(st.integers(0, 3)) == 0 and segments:  # often aim at a reserved directory
        segments[0] = draw(st.sampled_from(["memories", "skills"]))
    lead = draw(st.sampled_from(["/", "/", "/", "", "//", "\\", "./", "/./", "/../"]))
    tail = draw(st.sampled_from(["", "", "", "/", "/.", "/..", "%2f"]))
    return lead + "/".join(segments) + tail


PATHS = st.one_of(raw_paths(), st.text(max_size=30))


def _segments_ok(path: str) -> bool:
    return all(s not in ("", ".", "..") for s in path[1:].split("/"))


# --- 1. clean() ---------------------------------------------------------------------------------


@CLEAN
@given(PATHS)
def test_clean_never_lets_a_path_escape(path: str) -> None:
    try:
        cleaned = clean(path)
    except PathError:
        for role in ("owner", "member", None):  # a rejected path is rejected for every writer
            with pytest.raises(PathError):
                check_write(path, role)
        return
    assert cleaned == path  # returned as given: nothing decoded, folded or resolved
    assert path.startswith("/") and _segments_ok(path) and "\\" not in path
    assert posixpath.normpath(path) == path  # nothing a resolver could resolve
    # the reserved rule is about the literal bytes: a lookalike or an encoded form is another name
    literal = path.startswith((PREFIX_MEMORIES, PREFIX_SKILLS)) or path in ("/memories", "/skills")
    assert is_reserved(path) == literal
    for role in ("member", None):
        if literal:
            with pytest.raises(ReservedPathError):
                check_write(path, role)
        else:
            assert check_write(path, role) == path


def _random_path(rng: random.Random) -> str:
    """A cheap generator over the same alphabet, for volume (hypothesis spends ~5 ms an example
    on generation; this spends ~20 µs), with random code points from every Unicode category."""
    def char() -> str:
        band = rng.randrange(24)
        if band < 18:
            return chr(rng.randrange(0x20, 0x7F))
        if band == 18:
            return chr(rng.randrange(0x00, 0xA0))  # C0, DEL, C1 (and some ASCII)
        if band == 19:
            return rng.choice("\u200b\u200d\u202e\u2066\ufeff\u2028\u2029\ud800\ue000\U000e0001")
        if band < 22:
            return chr(rng.randrange(0xA0, 0x3000))
        if band == 22:
            return chr(rng.choice([rng.randrange(0x3000, 0xD800), rng.randrange(0x1F300, 0x1FB00),
                                   rng.randrange(0x20000, 0x2A6E0)]))
        return chr(rng.randrange(0x3000, 0x110000))  # mostly unassigned

    segments = []
    for _ in range(rng.randrange(7)):
        parts = []
        for _ in range(rng.randrange(1, 4)):
            kind = rng.randrange(4)
            if kind == 0:
                parts.append(rng.choice(ENCODED))
            elif kind == 1:
                parts.append(rng.choice(LOOKALIKES))
            elif kind == 2:
                parts.append(rng.choice(NEAR))
            else:
                parts.append("".join(char() for _ in range(rng.randrange(1, 6))))
        segments.append("".join(parts))
    if segments and rng.randrange(4) == 0:
        segments[0] = rng.choice(["memories", "skills"])
    lead = rng.choice(["/"] * 12 + ["", "//", "\\", "./", "/./", "/../"])
    return lead + "/".join(segments) + rng.choice([""] * 6 + ["/", "/.", "/..", "%2f"])


def test_clean_bulk_random() -> None:
    """The same property over 10x ``HANGO_FUZZ_EXAMPLES`` cheap random paths (seeded)."""
    rng = random.Random(20261130)
    accepted = reserved = 0
    for _ in range(EXAMPLES * 10):
        path = _random_path(rng)
        try:
            cleaned = clean(path)
        except PathError:
            continue
        accepted += 1
        assert cleaned == path and path.startswith("/") and _segments_ok(path), path
        assert "\\" not in path and posixpath.normpath(path) == path, path
        literal = is_reserved_literal(path)
        assert is_reserved(path) == literal, path
        reserved += literal
        try:
            check_write(path, None)
            refused = False
        except ReservedPathError:
            refused = True
        assert refused == literal, path
    # the generator reaches both sides of every rule, or the loop above proves little
    assert accepted > EXAMPLES and reserved > EXAMPLES // 20, (accepted, reserved)
    print(f"\n{EXAMPLES * 10} random paths: {accepted} accepted, {reserved} of them reserved")


def test_the_alphabet_reaches_the_rules() -> None:
    """What the strategy must produce for the property to mean anything (a sanity table)."""
    for path, accepted in [
        ("/notes/%2e%2e/memories/x", True),  # a literal name: nothing downstream decodes it
        ("/notes/../memories/x", False),
        ("/\uff4demories/AGENTS.md", True),  # fullwidth m: a different file, not reserved
        ("/memories\u2215AGENTS.md", True),  # division slash: one segment at the root
        ("/memories/\u202eAGENTS.md", False),
        ("/notes\\..\\memories", False),
        ("/a\x00b", False),
    ]:
        try:
            clean(path)
            ok = True
        except PathError:
            ok = False
        assert ok == accepted, path
    assert not is_reserved("/\uff4demories/AGENTS.md")
    assert not is_reserved("/memories\u2215AGENTS.md")


# --- the world the database layers share ----------------------------------------------------------


@dataclass
class World:
    db: Database
    tenant: str  # agents a1, a2
    other: str  # another tenant with its own a1
    owner: str
    member: str
    url: str
    admin: psycopg.Connection[Any]

    def snapshot(self) -> dict[tuple[str, str, str], tuple[int, str]]:
        rows = self.admin.execute(
            "SELECT tenant_id, agent_id, path, version, md5(content) FROM agent_files"
            " WHERE tenant_id = ANY(%s)", [[self.tenant, self.other]]).fetchall()
        return {(t, a, p): (v, h) for t, a, p, v, h in rows}


# No file "/memories" beside "/memories/AGENTS.md": a file and a directory may not share a
# name; writing "/memories" is still tried by every layer and refused.
SEEDS = ["/memories/AGENTS.md", "/skills/s/SKILL.md", "/notes/seed.md"]


@pytest.fixture(scope="module")
def world(db: Database, api_url: str) -> Iterator[World]:
    tenant = create_tenant(db, "fz-" + uuid.uuid4().hex[:12])
    other = create_tenant(db, "fz-" + uuid.uuid4().hex[:12])
    for t, agents in ((tenant, ("a1", "a2")), (other, ("a1",))):
        for agent in agents:
            save_agent(db, t, agent, AgentConfig())
            for path in SEEDS:
                PostgresBackend(db, t, agent).write(path, "seed")
    admin = psycopg.connect(db.admin_conninfo, autocommit=True)
    try:
        yield World(db, tenant, other, create_token(db, tenant, "owner"),
                    create_token(db, tenant, "member"), api_url, admin)
    finally:
        admin.close()


def _diff(before: dict[Any, Any], after: dict[Any, Any]) -> set[Any]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def _clashes(rows: dict[tuple[str, str, str], Any], tenant: str, agent: str, path: str) -> bool:
    """True when ``path`` would share its name with a file or directory there."""
    ancestors = {path[:i] for i in range(1, len(path)) if path[i] == "/"}
    return any(t == tenant and a == agent and (p in ancestors or p.startswith(path + "/"))
               for t, a, p in rows)


def _digest(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


# --- 2. the backend -------------------------------------------------------------------------------


@DB
@given(path=PATHS)
def test_backend_writes_land_exactly_where_clean_says(world: World, path: str) -> None:
    backend = PostgresBackend(world.db, world.tenant, "a2")
    body = "b-" + uuid.uuid4().hex
    before = world.snapshot()
    try:
        clean(path)
        valid = True
    except PathError:
        valid = False
    clash = valid and _clashes(before, world.tenant, "a2", path)
    try:
        backend.write(path, body)
        wrote = True
    except PathError:
        wrote = False
    except PathConflict:
        wrote = False
        assert clash, path
    assert wrote == (valid and not clash)
    changed = _diff(before, world.snapshot())
    assert changed == ({(world.tenant, "a2", path)} if wrote else set())
    if wrote:
        assert backend.read(path).content == body


# --- 3. the agent's tools in a real run -----------------------------------------------------------


@DB
@given(calls=st.lists(st.tuples(st.sampled_from(["write_file", "edit_file"]), PATHS),
                      min_size=1, max_size=8))
def test_agent_tools_never_write_reserved_or_foreign_rows(
    world: World, calls: list[tuple[str, str]]
) -> None:
    scripted = []
    for name, path in calls:
        args = ({"path": path, "content": "w-" + uuid.uuid4().hex} if name == "write_file"
                else {"path": path, "old_string": "seed", "new_string": "edited"})
        scripted.append(tool_call(name, args))
    model = SimulatedModel(policy=[scripted, "done"])
    before = world.snapshot()
    result = Agent(world.db, world.tenant, "a1", model).run("write these")
    assert result.stop_reason == "final"
    (results,) = [m.tool_results for m in result.messages if m.tool_results]
    succeeded = {(world.tenant, "a1", path) for (_, path), r in zip(calls, results, strict=True)
                 if not r.is_error}
    changed = _diff(before, world.snapshot())
    assert changed <= succeeded  # nothing outside what succeeded (an edit may be a no-op)
    for _, agent, path in succeeded:
        assert agent == "a1" and clean(path) == path and not is_reserved(path), path
    for (name, path), r in zip(calls, results, strict=True):
        if not r.is_error and name == "write_file":
            assert (world.tenant, "a1", path) in changed
        if is_reserved_literal(path):
            assert r.is_error and ("reserved prefix" in r.content or "invalid path" in r.content)


def is_reserved_literal(path: str) -> bool:
    return path.startswith((PREFIX_MEMORIES, PREFIX_SKILLS)) or path in ("/memories", "/skills")


# --- 4. the files API over real HTTP --------------------------------------------------------------

AGENT_PARTS = st.sampled_from([
    "a1", "a2", "a%31", "A1", "a1%2f..", "..", "%2e%2e", ".", "a2%2f..%2fa1", "a1%00", "a1%20",
    "%61%31", "a1;x", "a1%3b", "\\a1", "a1\\..\\a2", "a%c0%ae", "\uff41\uff11",
])
URL_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "?#%")


@st.composite
def url_paths(draw: st.DrawFn) -> str:
    """The part after ``/files/``: pieces left as typed (encoded forms stay encoded), the rest
    percent-encoded the way a client would, so the request target is printable ASCII."""
    segments = []
    for _ in range(draw(st.integers(0, 5))):
        pieces = draw(st.lists(st.one_of(
            st.sampled_from(ENCODED),
            PIECE.map(lambda s: quote(s, safe="")),
            st.text(URL_SAFE, max_size=6),
            st.text(max_size=6).map(lambda s: quote(s, safe="")),
        ), min_size=1, max_size=4))
        segments.append("".join(pieces))
    if draw(st.integers(0, 3)) == 0:
        segments.insert(0, draw(st.sampled_from(["memories", "skills", "%6demories", "skills%2f",
                                                 "memories%252f", "%2fmemories"])))
    return "/".join(segments)


@dataclass(frozen=True)
class Sent:
    method: str
    agent_part: str
    path_part: str
    role: str

    @property
    def target(self) -> str:
        target = f"/v1/agents/{self.agent_part}/files/{self.path_part}"
        return "".join(c if 0x21 <= ord(c) < 0x7F else quote(c, safe="") for c in target)


def _send(world: World, conn: http.client.HTTPConnection, sent: Sent,
          body: bytes) -> tuple[int, bytes]:
    token = world.owner if sent.role == "owner" else world.member
    headers = {"Authorization": f"Bearer {token}"}
    if sent.method == "PATCH":
        headers["Content-Type"] = "application/json"
    conn.request(sent.method, sent.target, body=body if sent.method != "DELETE" else None,
                 headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.getheader("Connection", "").lower() == "close":
        conn.close()
    return response.status, data


_ROUTE = re.compile(r"/v1/agents/(?P<agent>[^/]+)/files/(?P<path>.*)", re.DOTALL)


@pytest.fixture(scope="module")
def conn(world: World) -> Iterator[http.client.HTTPConnection]:
    parts = urlsplit(world.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    yield connection
    connection.close()


@DB
@given(sent=st.builds(Sent, st.sampled_from(["PUT", "PUT", "PUT", "PATCH", "DELETE"]),
                      AGENT_PARTS, url_paths(), st.sampled_from(["member", "member", "owner"])))
def test_http_requests_change_at_most_the_row_they_name(
    world: World, conn: http.client.HTTPConnection, sent: Sent
) -> None:
    marker = "h-" + uuid.uuid4().hex
    body = (json.dumps({"old": "seed", "new": marker}) if sent.method == "PATCH" else marker)
    before = world.snapshot()
    status, data = _send(world, conn, sent, body.encode())
    changed = _diff(before, world.snapshot())
    assert status < 500, (sent.target, status, data)
    if status >= 300:
        assert changed == set(), (sent.target, status, data)
        return
    # the request was accepted: it named exactly one row, in the token's tenant
    raw_path = sent.target.partition("?")[0]
    assert "%2f" not in raw_path.lower()  # an encoded slash is never accepted
    decoded = unquote_to_bytes(raw_path).decode("utf-8")  # decoded exactly once
    route = _ROUTE.fullmatch(decoded)
    assert route is not None, decoded
    agent, path = route["agent"], "/" + route["path"]
    assert re.fullmatch(ID_PATTERN, agent) and agent in ("a1", "a2")
    assert clean(path) == path
    if sent.role == "member":
        assert not is_reserved(path), (sent.target, path)
    key = (world.tenant, agent, path)
    if sent.method == "PUT":
        assert json.loads(data)["path"] == path
        assert changed == {key}
        assert world.snapshot()[key][1] == _digest(marker)
    elif sent.method == "PATCH":
        assert changed == {key} and json.loads(data)["path"] == path
    else:
        assert changed == {key} and key not in world.snapshot()


def _raw(url: str, target: bytes, token: str) -> int:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"PUT " + target + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     + token.encode() + b"\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


@pytest.mark.parametrize("target", [
    b"/v1/agents/a1/files/memories/AGENTS.md",  # the member's plain attempt: 403
    b"/v1/agents/a1/files/notes/../memories/AGENTS.md",
    b"/v1/agents/a1/files/notes/%2e%2e/memories/AGENTS.md",
    b"/v1/agents/a1/files/notes/%2E%2E/memories/AGENTS.md",
    b"/v1/agents/a1/files/notes%2f..%2fmemories/AGENTS.md",
    b"/v1/agents/a1/files/notes/%252e%252e/memories/AGENTS.md",  # a literal name '%2e%2e': ok
    b"/v1/agents/a1/files/notes/%c0%ae%c0%ae/memories/AGENTS.md",
    b"/v1/agents/a1/files/notes\\..\\memories\\AGENTS.md",
    b"/v1/agents/a1/files/notes/\xc0\xae\xc0\xae/memories/AGENTS.md",  # raw overlong bytes
    b"/v1/agents/a1/files/\xef\xbd\x8demories/AGENTS.md",  # raw UTF-8 (not in a valid target)
    b"/v1/agents/a1/files/memories%00/AGENTS.md",
    b"/v1/agents/a1/files//memories/AGENTS.md",
    b"/v1/agents/a1/files/./memories/AGENTS.md",
    b"/v1/agents/a2/../a1/files/memories/AGENTS.md",
    b"/v1/agents/a2%2f..%2fa1/files/memories/AGENTS.md",
    b"/v1/agents/a1/files/%6demories/AGENTS.md",  # %6d is 'm': decodes to the reserved path
    b"/v1/agents/a1/files/memories",
    b"/v1/agents/a1/files/skills/s/SKILL.md",
])
def test_raw_targets_a_member_sends(world: World, target: bytes) -> None:
    """Bytes on the wire, no client normalising anything: never a reserved or foreign row."""
    before = world.snapshot()
    status = _raw(world.url, target, world.member)
    changed = _diff(before, world.snapshot())
    assert status < 500
    assert all(not is_reserved(p) and t == world.tenant for t, _, p in changed), changed
    if status >= 300:
        assert changed == set()
    reserved_aims = (b"/memories/AGENTS.md", b"files/memories", b"skills/s/SKILL.md")
    if target.endswith(reserved_aims) and b"%25" not in target:
        assert status in (400, 403, 404, 422), (target, status)


@pytest.mark.parametrize(("encoded", "decoded"), [
    ("notes/%2541", "/notes/%41"),  # twice would give /notes/A
    ("notes/%252e%252e/x", "/notes/%2e%2e/x"),  # twice would give /notes/../x
    ("notes/a%252fb", "/notes/a%2fb"),  # twice would give /notes/a/b
    ("memories%252fAGENTS.md", "/memories%2fAGENTS.md"),  # a root file, not the memory file
])
def test_paths_are_decoded_exactly_once(world: World, encoded: str, decoded: str) -> None:
    parts = urlsplit(world.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        connection.request("PUT", f"/v1/agents/a2/files/{encoded}", body=b"once",
                           headers={"Authorization": f"Bearer {world.member}"})
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    assert response.status in (200, 201), body
    assert body["path"] == decoded
    assert PostgresBackend(world.db, world.tenant, "a2").read(decoded).content == "once"


def test_lookalike_paths_never_become_memory_or_skills(world: World) -> None:
    """Writes to names that look like the reserved ones succeed, as other files, and a run
    neither loads them as memory nor indexes them as skills."""
    tenant = create_tenant(world.db, "fz-" + uuid.uuid4().hex[:12])
    save_agent(world.db, tenant, "a1", AgentConfig())
    backend = PostgresBackend(world.db, tenant, "a1")
    skill = "---\nname: fake\ndescription: I am not a skill.\n---\n"
    lookalikes = ["/\uff4demories/AGENTS.md", "/memori\u0435s/AGENTS.md", "/Memories/AGENTS.md",
                  "/memories\u2215AGENTS.md", "/notes/%2e%2e/memories/AGENTS.md",
                  "/\u0455kills/x/SKILL.md", "/skiIls/x/SKILL.md", "/skills\u2215x/SKILL.md",
                  "/notes/%2e%2e/skills/x/SKILL.md", "/%2fskills/x/SKILL.md"]
    calls = [tool_call("write_file", {"path": p, "content": skill if "SKILL" in p else "FAKE"})
             for p in lookalikes]
    result = Agent(world.db, tenant, "a1", SimulatedModel(policy=[calls, "done"])).run("go")
    (results,) = [m.tool_results for m in result.messages if m.tool_results]
    assert [r.is_error for r in results] == [False] * len(lookalikes)
    assert sorted(backend.glob("/**")) == sorted(lookalikes)
    rerun = Agent(world.db, tenant, "a1", SimulatedModel()).run("hi")
    assert rerun.memory_bytes == 0 and rerun.skills_count == 0
    assert b"FAKE" not in rerun.requests[0].canonical()
    assert b"I am not a skill" not in rerun.requests[0].canonical()
