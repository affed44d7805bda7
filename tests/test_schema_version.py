"""The schema is applied once per version: a process whose files match runs one query, no DDL, no lock.

Before, every process and every CLI command ran the whole schema (DROP/CREATE POLICY among it)
under an advisory lock: 30 concurrent ``hango tenant create`` queued on that lock and stalled a
running server's requests behind the DDL's table locks. Now a row in ``hango_schema`` holds the
SHA-256 of the applied files and upgrade steps; one query compares it, and when it matches
nothing runs.

DDL is observed, not guessed: an event trigger in a database of the test's own logs every DDL
command, and the version row's ``xmin`` shows whether it was written.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from hango.db import _SCHEMA_LOCK, Database
from hango.settings import Settings, load_settings
from hango.upgrades import schema_files

SCHEMA = "".join(text.decode("utf-8") for _, text in schema_files())
LOG_DDL = """
CREATE TABLE public.ddl_log (tag text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION public.log_ddl() RETURNS event_trigger LANGUAGE plpgsql
    AS $$ BEGIN INSERT INTO public.ddl_log (tag) VALUES (tg_tag); END $$;
CREATE EVENT TRIGGER log_ddl ON ddl_command_start EXECUTE FUNCTION public.log_ddl();
"""


@pytest.fixture
def private(db: Database) -> Iterator[Settings]:
    """Settings naming a fresh database on the test server (dropped afterwards)."""
    with db.admin() as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not (row and row[0]):
        pytest.skip("an event trigger needs a superuser")
    name = "hango_schema_" + uuid.uuid4().hex[:8]
    yield load_settings(database_name=name, database_url=db.settings.database_url,
                        data_dir=db.data_dir)
    with psycopg.connect(db._maintenance_conninfo, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _log(conn: psycopg.Connection[object]) -> list[str]:
    return [r[0] for r in conn.execute("SELECT tag FROM public.ddl_log ORDER BY at").fetchall()]


def _version(conn: psycopg.Connection[object]) -> tuple[object, ...]:
    row = conn.execute("SELECT version, applied_at, xmin::text FROM hango_schema").fetchone()
    assert row is not None
    return tuple(row)


def test_an_up_to_date_database_gets_no_ddl_and_no_lock(private: Settings) -> None:
    first = Database(private)  # a new database: the schema is applied, the version written
    try:
        with first.admin() as conn:
            applied = _version(conn)
            conn.execute(LOG_DDL)
        for _ in range(3):  # three more processes (or CLI commands) starting
            Database(private).close()
        with first.admin() as conn:
            assert _log(conn) == []  # no DDL at all
            assert _version(conn) == applied  # the row was not even rewritten

        # and no lock: a start goes through while another session holds the schema lock
        with psycopg.connect(first.admin_conninfo, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", [_SCHEMA_LOCK])
            started: list[Database] = []
            thread = threading.Thread(target=lambda: started.append(Database(private)),
                                      daemon=True)
            thread.start()
            thread.join(timeout=120)  # a generous bound: it would wait for ever on the lock
            assert started, "Database() waited on the schema lock of an up-to-date database"
            started[0].close()
    finally:
        first.close()


def test_a_changed_schema_is_applied_once(private: Settings) -> None:
    first = Database(private)
    try:
        with first.admin() as conn:
            applied = _version(conn)
            conn.execute(LOG_DDL)
            conn.execute("UPDATE hango_schema SET version = 'an older schema'")
        second = Database(private)  # sees a different version: applies the schema
        second.close()
        Database(private).close()  # and the next start does not again
        with first.admin() as conn:
            tags = _log(conn)
            assert "CREATE POLICY" in tags and "CREATE TABLE" in tags
            policies = conn.execute("SELECT count(*) FROM pg_policies"
                                    " WHERE schemaname = 'public'").fetchone()
            assert policies is not None and policies[0] > SCHEMA.count("\nCREATE POLICY ")
            assert tags.count("CREATE POLICY") == policies[0]  # applied once, not twice
            version = _version(conn)
        assert version[0] == applied[0] and version[1] > applied[1]
    finally:
        first.close()
