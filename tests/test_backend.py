"""A capped read transfers only the cap and touches only the first chunks; `read_many` is one query,
in the order given; versions, create-only, edit, delete, `ls`, `glob`; the heads scan uses the
partial index (`EXPLAIN`); RLS hides other tenants even without a `WHERE`, as `hango_app` (not
superuser, not BYPASSRLS).

PostgresBackend against the real database: reads capped in SQL, writes, edits, versions,
listings, the indexed skills scan, and row-level security under the app role.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from psycopg import sql

from hango.agents import AgentConfig, create_tenant, save_agent
from hango.db import Database
from hango.fs.backend import (
    EditError,
    FileNotFound,
    NotText,
    PostgresBackend,
    VersionConflict,
)
from hango.fs.path import PathError

MIB = 1024 * 1024


class Explaining:
    """A Database whose tenant transactions EXPLAIN each statement before running it.

    The plans are those of the backend's own SQL with its own parameters, on the real server,
    as the app role with the tenant set: nothing is re-typed in the test.
    """

    def __init__(self, db: Database, options: str = "") -> None:
        self.db = db
        self.options = options
        self.plans: list[Any] = []

    @contextmanager
    def tenant(self, tenant_id: str) -> Iterator[Any]:
        with self.db.tenant(tenant_id) as conn:
            outer = self

            class Conn:
                def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
                    explain = f"EXPLAIN ({outer.options}) " if outer.options else "EXPLAIN "
                    rows = conn.execute(sql.SQL(explain) + sql.SQL(query) if isinstance(query, str)
                                        else sql.SQL(explain) + query, params).fetchall()
                    outer.plans.append(rows[0][0] if outer.options else
                                       "\n".join(r[0] for r in rows))
                    return conn.execute(query, params, **kw)

            yield Conn()


def _fill(db: Database, tenant: str, agent: str, paths: list[str], content: bytes = b"x") -> None:
    with db.tenant(tenant) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
            " VALUES (%s, %s, %s, %s, %s)",
            [(tenant, agent, p, content, len(content)) for p in paths],
        )


# --- reads -------------------------------------------------------------------------------------


def test_a_capped_read_transfers_only_the_cap(db: Database, backend: PostgresBackend) -> None:
    backend.write("/big.md", "a" * (10 * MIB))
    backend.bytes_read = 0
    head = backend.read("/big.md", limit=64 * 1024)
    assert backend.bytes_read == 64 * 1024  # 64 KiB left the database, not 10 MiB
    assert head.size == 10 * MIB and head.truncated and head.content == "a" * 65536
    full = backend.read("/big.md")
    assert backend.bytes_read == 64 * 1024 + 10 * MIB and not full.truncated


def test_a_capped_read_touches_only_the_first_chunks(db: Database, backend: PostgresBackend) -> None:
    """STORAGE EXTERNAL: substring() detoasts only the slice, so the server reads ~10 pages of a
    10 MiB value instead of ~1300 (counted with EXPLAIN (ANALYZE, BUFFERS))."""
    backend.write("/big.md", "b" * (10 * MIB))

    def pages(limit: int | None) -> int:
        explaining = Explaining(db, "ANALYZE, BUFFERS, FORMAT JSON")
        PostgresBackend(explaining, backend.tenant_id, backend.agent_id).read(  # type: ignore[arg-type]
            "/big.md", limit=limit)
        plan = explaining.plans[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        node = plan[0]["Plan"]  # the top node's counts include its children's
        return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])

    capped, whole = pages(64 * 1024), pages(None)
    assert capped < 60, capped
    assert whole > 1000, whole


def test_read_cuts_at_a_character_boundary(backend: PostgresBackend) -> None:
    backend.write("/utf8.md", "é" * 10)  # 20 bytes
    head = backend.read("/utf8.md", limit=5)
    assert head.content == "éé" and head.size == 20 and head.truncated


def test_a_whole_file_ending_inside_a_character_is_not_text(db: Database,
                                                            backend: PostgresBackend) -> None:
    """Only a read that was cut may drop a cut character: bytes stored around the API (plain SQL)
    that end inside a character are refused whole, as edit refuses them, never served shortened."""
    with db.admin(backend.tenant_id) as conn:
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                     " VALUES (%s, %s, '/cut.md', '\\x6162e282'::bytea, 4)",
                     [backend.tenant_id, backend.agent_id])
    with pytest.raises(NotText, match="not UTF-8 text at byte 2"):
        backend.read("/cut.md")
    assert backend.read("/cut.md", limit=3).content == "ab"  # a cut read: the cut is dropped


def test_read_many_is_one_query_in_order_and_skips_missing(backend: PostgresBackend) -> None:
    backend.write("/memories/b.md", "B")
    backend.write("/memories/a.md", "A")
    found = backend.read_many(["/memories/b.md", "/memories/none.md", "/memories/a.md"], 100)
    assert [(f.path, f.content) for f in found] == [("/memories/b.md", "B"), ("/memories/a.md", "A")]


def test_read_missing_and_bad_paths(backend: PostgresBackend) -> None:
    with pytest.raises(FileNotFound, match="no such file: /nope"):
        backend.read("/nope")
    with pytest.raises(PathError, match=r"'\.\.' segment"):
        backend.read("/notes/../memories/AGENTS.md")


# --- writes, versions, edits, deletes ----------------------------------------------------------


def test_write_versions_and_conflicts(backend: PostgresBackend) -> None:
    assert backend.write("/notes/x.md", "one") == 1
    assert backend.write("/notes/x.md", "two") == 2
    assert backend.write("/notes/x.md", "three", if_version=2) == 3
    with pytest.raises(VersionConflict) as info:
        backend.write("/notes/x.md", "stale", if_version=2)
    assert (info.value.expected, info.value.actual) == (2, 3)
    assert "nothing was written" in str(info.value)
    assert backend.read("/notes/x.md").content == "three"
    with pytest.raises(VersionConflict) as missing:
        backend.write("/notes/none.md", "x", if_version=4)
    assert missing.value.actual is None and "does not exist" in str(missing.value)


def test_create_only(backend: PostgresBackend) -> None:
    assert backend.write("/notes/new.md", "first", if_version=0) == 1
    with pytest.raises(VersionConflict) as info:
        backend.write("/notes/new.md", "second", if_version=0)
    assert info.value.actual == 1
    assert backend.read("/notes/new.md").content == "first"


def test_edit(backend: PostgresBackend) -> None:
    backend.write("/notes/e.md", "alpha beta alpha")
    with pytest.raises(EditError, match="occurs 2 times"):
        backend.edit("/notes/e.md", "alpha", "gamma")
    with pytest.raises(EditError, match="not found"):
        backend.edit("/notes/e.md", "delta", "gamma")
    with pytest.raises(EditError, match="empty"):
        backend.edit("/notes/e.md", "", "gamma")
    assert backend.read("/notes/e.md").version == 1  # none of that wrote anything
    assert backend.edit("/notes/e.md", "beta", "BETA") == 2
    assert backend.edit("/notes/e.md", "alpha", "A", replace_all=True) == 3
    assert backend.read("/notes/e.md").content == "A BETA A"
    with pytest.raises(VersionConflict):
        backend.edit("/notes/e.md", "A", "B", if_version=2)
    with pytest.raises(FileNotFound):
        backend.edit("/notes/none.md", "a", "b")


def test_delete(backend: PostgresBackend) -> None:
    backend.write("/notes/d.md", "x")
    backend.write("/notes/d.md", "y")
    with pytest.raises(VersionConflict):
        backend.delete("/notes/d.md", if_version=1)
    backend.delete("/notes/d.md", if_version=2)
    with pytest.raises(FileNotFound):
        backend.read("/notes/d.md")
    with pytest.raises(FileNotFound):
        backend.delete("/notes/d.md")


# --- listings ----------------------------------------------------------------------------------


def test_ls_lists_direct_children(backend: PostgresBackend) -> None:
    for path in ["/a.md", "/notes/x.md", "/notes/deep/y.md", "/notes/deep/z.md", "/notes_2/w"]:
        backend.write(path, path)
    root = backend.ls("/")
    assert [(e.path, e.is_dir) for e in root] == [
        ("/a.md", False), ("/notes/", True), ("/notes_2/", True)]
    assert root[0].size == len("/a.md") and root[0].version == 1
    notes = backend.ls("/notes")
    assert [e.path for e in notes] == ["/notes/deep/", "/notes/x.md"]
    assert backend.ls("/nothing/") == []


def test_ls_escapes_like_wildcards(backend: PostgresBackend) -> None:
    backend.write("/a_b/x", "1")
    backend.write("/axb/y", "2")
    backend.write("/50%/z", "3")
    assert [e.path for e in backend.ls("/a_b/")] == ["/a_b/x"]
    assert [e.path for e in backend.ls("/50%/")] == ["/50%/z"]


def test_glob(backend: PostgresBackend) -> None:
    for path in ["/skills/a/SKILL.md", "/skills/b/c/SKILL.md", "/skills/SKILL.md",
                 "/skills/a/notes.md", "/notes/SKILL.md", "/skills/a/SKILL.mdx"]:
        backend.write(path, "x")
    assert backend.glob("/skills/**/SKILL.md") == [
        "/skills/SKILL.md", "/skills/a/SKILL.md", "/skills/b/c/SKILL.md"]
    assert backend.glob("/skills/*/SKILL.md") == ["/skills/a/SKILL.md"]
    assert backend.glob("/skills/a/*.md") == ["/skills/a/SKILL.md", "/skills/a/notes.md"]
    assert backend.glob("/skills/a/SKILL.md?") == ["/skills/a/SKILL.mdx"]
    assert backend.glob("/**/SKILL.md") == [
        "/notes/SKILL.md", "/skills/SKILL.md", "/skills/a/SKILL.md", "/skills/b/c/SKILL.md"]
    assert backend.glob("/") == []
    for bad, rule in [("skills/*", "absolute"), ("/a/../*", "'..' segment"),
                      ("/a\x00*", "U+0000"), ("//*", "empty segment")]:
        with pytest.raises(ValueError, match=re.escape(rule)):
            backend.glob(bad)


# --- the skills scan is indexed ----------------------------------------------------------------


def test_heads_scan_uses_an_index(db: Database, backend: PostgresBackend) -> None:
    tenant, agent = backend.tenant_id, backend.agent_id
    _fill(db, tenant, agent, [f"/notes/n{i:05}.md" for i in range(6000)])
    _fill(db, tenant, agent, [f"/skills/s{i:02}/SKILL.md" for i in range(12)])
    _fill(db, tenant, agent, [f"/skills/s{i:02}/reference.md" for i in range(12)])
    with db.admin() as conn:
        conn.execute("ANALYZE agent_files")  # real statistics, not enable_seqscan = off

    explaining = Explaining(db)
    found = PostgresBackend(explaining, tenant, agent).heads(  # type: ignore[arg-type]
        ["/skills/"], "SKILL.md", 100)
    assert [f.path for f in found] == [f"/skills/s{i:02}/SKILL.md" for i in range(12)]
    (plan,) = explaining.plans
    assert "Seq Scan" not in plan, plan
    assert "Index" in plan and "agent_files_skill_md" in plan, plan


# --- row-level security ------------------------------------------------------------------------


def test_every_table_with_tenant_rows_forces_row_level_security(db: Database) -> None:
    """FORCE, so that the tables' owner (the URL's role on a managed server) is held too; the
    one exception is api_tokens, looked up before a tenant is known (schema.sql)."""
    with db.admin() as conn:
        rows = conn.execute(
            """SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c
                JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id'
               WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'""").fetchall()
    unforced = {name for name, rls, forced in rows if not (rls and forced)}
    assert len(rows) >= 8 and unforced == {"api_tokens"}, rows


def test_rls_hides_other_tenants_even_without_where(db: Database) -> None:
    a, b = (create_tenant(db, f"rls-{uuid.uuid4().hex[:10]}") for _ in range(2))
    for tenant in (a, b):
        save_agent(db, tenant, "shared", AgentConfig())
        PostgresBackend(db, tenant, "shared").write("/memories/AGENTS.md", f"secret of {tenant}")

    with db.tenant(b) as conn:
        role = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles"
                            " WHERE rolname = current_user").fetchone()
        assert role == (False, False)  # RLS would not bind a superuser or a BYPASSRLS role
        files = conn.execute("SELECT tenant_id, content FROM agent_files").fetchall()
        agents = conn.execute("SELECT tenant_id FROM agents").fetchall()
        tenants = conn.execute("SELECT tenant_id FROM tenants").fetchall()
    assert files and {t for t, _ in files} == {b}
    assert all(bytes(c) != f"secret of {a}".encode() for _, c in files)
    assert {t for (t,) in agents} == {b} and tenants == [(b,)]

    with db.app() as conn:  # no tenant set: nothing at all
        assert conn.execute("SELECT count(*) FROM agent_files").fetchone() == (0,)

    with db.admin(a) as conn:  # the rows are there; only the policy hid them
        count = conn.execute("SELECT count(*) FROM agent_files WHERE tenant_id = %s",
                             [a]).fetchone()
    assert count == (1,)

    # and a write aimed at another tenant's rows is refused by the policy, not just filtered
    with pytest.raises(Exception, match="row-level security"), db.tenant(b) as conn:
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                     " VALUES (%s, 'shared', '/x', 'x', 1)", [a])
