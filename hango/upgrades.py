"""Bring a database to this hango's schema: set up an empty one, or upgrade one an earlier release
made, in place, keeping every row; refuse any other with a message that says what to do.

The files of ``hango/schema/`` say what the schema is: each table in its final shape, applied in
name order, every statement idempotent. On a database an earlier release made the tables are
already there in an older shape, which ``CREATE TABLE IF NOT EXISTS`` leaves alone; so every
change to the schema comes with a named step in :data:`STEPS` (simonw/llm's ``migrations.py``
is the model), recorded in ``hango_schema_steps`` once applied. An upgrade runs the steps the
database lacks, in order, then the files again (new tables, functions, policies and grants come
from them). A step runs before the files, so it may meet a database that lacks its table (an
older release's, to which the files then add the table whole): it says ``ALTER TABLE IF EXISTS
... ADD COLUMN IF NOT EXISTS``. A change the files make on their own (a new table, a function's
new body) is a step with no SQL: the database still records it, so an older hango, which does not
know the step, refuses that database instead of putting back its own functions.

Refused: a database with a step this hango does not know (a newer hango made it), one older than
release 85d6e28 (the oldest it upgrades), and hango's tables without hango's version row.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

from hango.db_errors import DatabaseError

log = logging.getLogger("hango.db")

# The release every upgrade starts from: databases it made (or any later hango) are upgraded.
BASELINE = "85d6e28"


@dataclass(frozen=True)
class Step:
    """One named change to the schema since :data:`BASELINE`. ``sql`` is idempotent; empty when
    the files make the change themselves on an upgrade."""

    name: str
    sql: str = ""


STEPS: tuple[Step, ...] = (
    # A run's state and result hold U+0000 when a run read it: json keeps it, jsonb refuses it.
    Step("runs-state-result-json", """
        DO $$
        BEGIN
            IF (SELECT a.atttypid FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = pg_catalog.to_regclass('public.runs')
                   AND a.attname = 'state') = 'jsonb'::regtype THEN
                ALTER TABLE public.runs ALTER COLUMN result DROP DEFAULT,
                    ALTER COLUMN state TYPE json USING state::json,
                    ALTER COLUMN result TYPE json USING result::json,
                    ALTER COLUMN result SET DEFAULT '{}';
            END IF;
        END
        $$"""),
    # A resume's claim is a lease that dies with its holder.
    Step("runs-claim-lease", """
        ALTER TABLE IF EXISTS public.runs ADD COLUMN IF NOT EXISTS claim_token text,
                                          ADD COLUMN IF NOT EXISTS claim_expires_at timestamptz"""),
    Step("run-calls"),  # the table of a resume's done calls (40-runs.sql)
    Step("proposals-proposed-by", """
        ALTER TABLE IF EXISTS public.proposals ADD COLUMN IF NOT EXISTS proposed_by text"""),
    Step("proposals-listing-index"),  # proposals_listing, proposals_run (40-runs.sql)
    # What the retention sweep counts of a tenant's runs.
    Step("tenant-usage-runs", """
        ALTER TABLE IF EXISTS public.tenant_usage
            ADD COLUMN IF NOT EXISTS runs bigint NOT NULL DEFAULT 0,
            ADD COLUMN IF NOT EXISTS run_bytes bigint NOT NULL DEFAULT 0,
            ADD COLUMN IF NOT EXISTS runs_swept_at timestamptz"""),
    Step("exercise-passes"),  # a learner's passed exercises (70-course.sql)
    Step("tokens-last-owner-kept"),  # hango_token_revoke, hango_token_create (30-tokens.sql)
    Step("read-file-takes-app-role"),  # hango_read_file (30-tokens.sql)
    Step("owner-row-level-security"),  # FORCE and hango_all_tenants (90-owner-rls.sql)
    # Memory history and undo: who wrote a file's version, and what its earlier versions hold.
    Step("file-authors", """
        ALTER TABLE IF EXISTS public.agent_files ADD COLUMN IF NOT EXISTS written_by text,
                                                 ADD COLUMN IF NOT EXISTS proposal_id text,
                                                 ADD COLUMN IF NOT EXISTS restored_from bigint"""),
    Step("tenant-usage-history", """
        ALTER TABLE IF EXISTS public.tenant_usage
            ADD COLUMN IF NOT EXISTS history_versions bigint NOT NULL DEFAULT 0,
            ADD COLUMN IF NOT EXISTS history_bytes bigint NOT NULL DEFAULT 0"""),
    Step("file-versions"),  # agent_file_versions and its usage triggers (50-history.sql)
    # The prompts of runs, and who started a run (a member sees its own runs only).
    Step("runs-started-by", """
        ALTER TABLE IF EXISTS public.runs ADD COLUMN IF NOT EXISTS started_by text"""),
    Step("run-prompts"),  # run_prompts and the runs listing's index (40-runs.sql)
    # A tenant's defaults for its agents, set by an owner.
    Step("tenant-defaults", """
        ALTER TABLE IF EXISTS public.tenants
            ADD COLUMN IF NOT EXISTS defaults jsonb NOT NULL DEFAULT '{}'"""),
    Step("learner-checks"),  # each seat's exercise checks on a shared server (70-course.sql)
    # A counter for memory and one for skills (a memory edit re-sends no skill head), and what a
    # skills delta reads (agent_skill_deletions, agent_files.changed: 80-speed.sql). The one
    # counter becomes both, so every cache made before reads everything once.
    Step("split-change-counters", """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid = pg_catalog.to_regclass('public.agent_changes')
                          AND a.attname = 'counter' AND NOT a.attisdropped) THEN
                ALTER TABLE public.agent_changes ADD COLUMN memories bigint,
                                                 ADD COLUMN skills bigint,
                                                 ADD COLUMN skills_since bigint;
                UPDATE public.agent_changes
                   SET memories = counter, skills = counter, skills_since = counter;
                ALTER TABLE public.agent_changes ALTER COLUMN memories SET NOT NULL,
                                                 ALTER COLUMN skills SET NOT NULL,
                                                 ALTER COLUMN skills_since SET NOT NULL,
                                                 DROP COLUMN counter;
            END IF;
        END
        $$"""),
)

# Tables and columns a database of the baseline release has; one lacking any is older still.
_BASELINE_HAS = (("tenants", "tenant_id"), ("agents", "config"), ("agent_files", "skill_head"),
                 ("api_tokens", "token_id"), ("api_tokens", "last_used_at"),
                 ("tenant_usage", "bytes"), ("runs", "state"), ("proposals", "skill"),
                 ("agent_changes", "counter"))
_HANGO_TABLES = ("tenants", "agents", "agent_files", "api_tokens")
_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS public.hango_schema (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version    text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS public.hango_schema_steps (
    step       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON public.hango_schema, public.hango_schema_steps FROM PUBLIC, hango_app;
"""


def schema_files() -> list[tuple[str, bytes]]:
    """``hango/schema/*.sql``, in name order: the order they are applied in."""
    folder = resources.files("hango").joinpath("schema")
    return sorted((f.name, f.read_bytes()) for f in folder.iterdir() if f.name.endswith(".sql"))


def schema_version() -> str:
    """The SHA-256 of the files and the steps: what ``hango_schema.version`` holds when the
    database has this schema."""
    digest = hashlib.sha256()
    for name, text in schema_files():
        digest.update(b"file\0%s\0%s\0" % (name.encode(), text))
    for step in STEPS:
        digest.update(b"step\0%s\0%s\0" % (step.name.encode(), step.sql.encode()))
    return digest.hexdigest()


def applied_version(conn: psycopg.Connection[Any], in_transaction: bool = False) -> str | None:
    """The ``hango_schema`` version row, or ``None`` on a database hango has not set up yet (no table).

    Outside a transaction this is one query; inside one, a missing table must not abort the
    transaction, so it is looked up first."""
    if not in_transaction:
        try:
            row = conn.execute("SELECT version FROM public.hango_schema").fetchone()
        except psycopg.errors.UndefinedTable:
            return None
    else:
        exists = conn.execute("SELECT to_regclass('public.hango_schema') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return None
        row = conn.execute("SELECT version FROM public.hango_schema").fetchone()
    return None if row is None else str(row[0])


def bring_up_to_date(conn: psycopg.Connection[Any], database: str) -> list[str]:
    """Set up, upgrade or refuse, in the caller's transaction (which holds the schema lock).
    Returns the names of the steps it ran: none on a new database, whose files make the final
    shape, nor on one that needs only its files applied again."""
    present = {name for name in (*_HANGO_TABLES, "hango_schema", "hango_schema_steps")
               if _exists(conn, name)}
    known = [step.name for step in STEPS]
    if not present:
        todo: list[Step] = []
    elif "hango_schema_steps" in present:
        applied = {r[0] for r in conn.execute("SELECT step FROM public.hango_schema_steps")}
        newer = sorted(applied - set(known))
        if newer:
            raise DatabaseError(
                f"database {database!r} was set up by a newer hango: it has the schema step(s) "
                f"{', '.join(newer)}, which this hango does not know. Run the newer hango (git "
                f"pull, then make install), or point HANGO_DATA_DIR or HANGO_DATABASE_URL at "
                f"another database; nothing was changed")
        todo = [step for step in STEPS if step.name not in applied]
    elif "hango_schema" in present:
        lacks = [f"{t}.{c}" for t, c in _BASELINE_HAS if not _has_column(conn, t, c)]
        if lacks:
            raise DatabaseError(
                f"database {database!r} was set up by a hango older than release {BASELINE}, the "
                f"oldest this one upgrades (it lacks {', '.join(lacks)}). Upgrade it in two "
                f"hops: run hango at {BASELINE} on it once (git checkout {BASELINE}, make "
                f"install, then any hango command, e.g. hango db start), then this one; or start "
                f"from an empty database (another HANGO_DATA_DIR or HANGO_DATABASE_URL); nothing "
                f"was changed")
        todo = list(STEPS)  # the baseline release, or a hango between it and the first steps
    else:
        raise DatabaseError(
            f"database {database!r} has hango's tables ({', '.join(sorted(present))}) but no "
            f"hango_schema row saying which hango made them, so hango cannot tell what to "
            f"upgrade. Point HANGO_DATA_DIR or HANGO_DATABASE_URL at hango's own database, or "
            f"at an empty one; nothing was changed")
    for step in todo:
        if step.sql:
            conn.execute(step.sql.encode())
    for _name, text in schema_files():
        conn.execute(text)
    conn.execute(_BOOKKEEPING.encode())
    with conn.cursor() as cur:  # the database now has every step's change
        cur.executemany("INSERT INTO public.hango_schema_steps (step) VALUES (%s)"
                        " ON CONFLICT (step) DO NOTHING", [(name,) for name in known])
    if todo:
        log.info("hango: database %r upgraded in place: %s", database,
                 ", ".join(step.name for step in todo))
    return [step.name for step in todo]


def _exists(conn: psycopg.Connection[Any], table: str) -> bool:
    row = conn.execute("SELECT pg_catalog.to_regclass(%s) IS NOT NULL", [f"public.{table}"])
    found = row.fetchone()
    return bool(found and found[0])


def _has_column(conn: psycopg.Connection[Any], table: str, column: str) -> bool:
    row = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = 'public'"
                       " AND table_name = %s AND column_name = %s", [table, column]).fetchone()
    return row is not None
