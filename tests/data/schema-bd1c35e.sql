-- hango's whole schema. Applied once per version (see hango_schema); every statement is idempotent.
-- Memory and skills add no table: they are rows of agent_files under /memories/ and /skills/.

DO $$
BEGIN
    -- The role the application runs as: no superuser, no BYPASSRLS, owns nothing.
    CREATE ROLE hango_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
EXCEPTION WHEN duplicate_object THEN
    NULL;  -- roles are cluster-wide: another database (or process) made it first
END
$$;

CREATE TABLE IF NOT EXISTS tenants (
    tenant_id  text PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Per-agent config: tool allowlist, memory sources, skills sources (validated by the API).
CREATE TABLE IF NOT EXISTS agents (
    tenant_id  text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    agent_id   text NOT NULL CHECK (agent_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    config     jsonb NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id)
);

-- Bearer tokens, stored as SHA-256 digests. Looked up before a tenant is known, so no RLS here;
-- the app role may read a row only by its digest through hango_principal().
CREATE TABLE IF NOT EXISTS api_tokens (
    token_sha256 bytea PRIMARY KEY,
    tenant_id    text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    role         text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    label        text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The one filesystem. COLLATE "C" makes the primary key usable for LIKE '/skills/%' scans.
-- STORAGE EXTERNAL keeps large contents uncompressed out of line, so substring(content, 1, n)
-- fetches only the first chunks: a 10 MiB file is never transferred to read 64 KiB.
CREATE TABLE IF NOT EXISTS agent_files (
    tenant_id  text NOT NULL,
    agent_id   text NOT NULL,
    path       text COLLATE "C" NOT NULL,
    content    bytea NOT NULL,
    size       integer NOT NULL,
    version    bigint NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id, path),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents ON DELETE CASCADE
);
ALTER TABLE agent_files ALTER COLUMN content SET STORAGE EXTERNAL;

-- The skills scan: one index holding only SKILL.md rows, so 10,000 other files cost nothing.
CREATE INDEX IF NOT EXISTS agent_files_skill_md
    ON agent_files (tenant_id, agent_id, path)
    WHERE path LIKE '%/SKILL.md';

-- Row-level security: every statement runs with hango.tenant_id set (SET LOCAL), so a missing
-- WHERE clause still cannot reach another tenant's rows. Two locks, not one.
ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_files ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON agents;
CREATE POLICY tenant_isolation ON agents
    USING (tenant_id = current_setting('hango.tenant_id', true));
DROP POLICY IF EXISTS tenant_isolation ON agent_files;
CREATE POLICY tenant_isolation ON agent_files
    USING (tenant_id = current_setting('hango.tenant_id', true));
DROP POLICY IF EXISTS tenant_isolation ON tenants;
CREATE POLICY tenant_isolation ON tenants
    USING (tenant_id = current_setting('hango.tenant_id', true));

REVOKE ALL ON api_tokens FROM hango_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON agents, agent_files, tenants TO hango_app;

-- === Hardening (issue 10, h1): a file and a directory never share a name; per-tenant quotas ===
--
-- 1. File or directory. "/notes" may be a file or a directory, never both. A row trigger checks
--    every new path: no ancestor ("/notes" for "/notes/x") may be a file, and no file may lie
--    under the path itself (the C-collated range ["/notes/", "/notes0") of the primary key).
--    A check alone would race: two writers of "/notes" and "/notes/x" could each see nothing
--    and both commit. Every such conflict is between two paths with the same first segment, so
--    the trigger first takes a transaction-scoped advisory lock on (tenant, agent, first
--    segment): exactly the writers that could conflict queue, everyone else runs in parallel.
--    Under READ COMMITTED each query in the trigger takes a fresh snapshot, so once the lock is
--    granted it sees what the previous holder committed. The error is an exclusion_violation
--    (23P01) with CONSTRAINT agent_files_file_or_directory; the backend turns it into PathConflict.
CREATE OR REPLACE FUNCTION hango_file_or_directory() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    parts text[] := string_to_array(NEW.path, '/');
    ancestors text[] := '{}';  -- "/a" and "/a/b" for "/a/b/c"
    clash text;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended(NEW.tenant_id || '/' || NEW.agent_id || '/' || coalesce(parts[2], ''), 0));
    FOR n IN 2 .. cardinality(parts) - 1 LOOP
        ancestors := ancestors || array_to_string(parts[1:n], '/');
    END LOOP;
    SELECT f.path INTO clash FROM agent_files f
     WHERE f.tenant_id = NEW.tenant_id AND f.agent_id = NEW.agent_id
       AND f.path = ANY (ancestors)
     LIMIT 1;
    IF clash IS NOT NULL THEN
        RAISE EXCEPTION '%: % is a file, so it cannot also be a directory (a file and a directory may not share a name); nothing was written', NEW.path, clash
            USING ERRCODE = 'exclusion_violation', CONSTRAINT = 'agent_files_file_or_directory',
                  DETAIL = clash;
    END IF;
    SELECT f.path INTO clash FROM agent_files f
     WHERE f.tenant_id = NEW.tenant_id AND f.agent_id = NEW.agent_id
       AND f.path >= NEW.path || '/' AND f.path < NEW.path || '0'
     ORDER BY f.path LIMIT 1;
    IF clash IS NOT NULL THEN
        RAISE EXCEPTION '%: %/ is a directory (it holds %), so it cannot also be a file (a file and a directory may not share a name); nothing was written', NEW.path, NEW.path, clash
            USING ERRCODE = 'exclusion_violation', CONSTRAINT = 'agent_files_file_or_directory',
                  DETAIL = clash;
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER agent_files_file_or_directory
    BEFORE INSERT OR UPDATE OF path ON agent_files
    FOR EACH ROW EXECUTE FUNCTION hango_file_or_directory();

-- 2. Quotas. One row per tenant holds its file count and bytes, kept by statement triggers on
--    agent_files (one update per statement, from its transition tables, so a bulk INSERT of
--    200,000 rows costs one update, not 200,000). A statement that adds files or bytes updates
--    the row, which locks it until commit: concurrent writers of one tenant queue on it, and
--    each adds to what the previous one committed, so no interleaving can overshoot. The limits
--    are the backend's settings (HANGO_TENANT_MAX_FILES, HANGO_TENANT_MAX_BYTES), set for the
--    write's transaction as hango.tenant_max_files and hango.tenant_max_bytes; unset (an
--    administrator's bulk load), the usage is counted but not limited. Only a statement that
--    *grows* a tenant over its quota is refused: deleting or shrinking always works. The error is
--    a check_violation (23514) with CONSTRAINT hango_quota_files or hango_quota_bytes.
CREATE TABLE IF NOT EXISTS tenant_usage (
    tenant_id text PRIMARY KEY REFERENCES tenants ON DELETE CASCADE,
    files     bigint NOT NULL DEFAULT 0,
    bytes     bigint NOT NULL DEFAULT 0
);
ALTER TABLE tenant_usage ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON tenant_usage;
CREATE POLICY tenant_isolation ON tenant_usage
    USING (tenant_id = current_setting('hango.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON tenant_usage TO hango_app;

CREATE OR REPLACE FUNCTION hango_tenant_usage() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    max_files bigint := nullif(current_setting('hango.tenant_max_files', true), '')::bigint;
    max_bytes bigint := nullif(current_setting('hango.tenant_max_bytes', true), '')::bigint;
    r record;
    deltas jsonb;  -- [{tenant_id, files, bytes}]: what this statement added, per tenant
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE tenant_usage u SET files = u.files - d.files, bytes = u.bytes - d.bytes
          FROM (SELECT tenant_id, count(*) AS files, sum(size) AS bytes
                  FROM old_rows GROUP BY tenant_id) d
         WHERE u.tenant_id = d.tenant_id;
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(d) INTO deltas
          FROM (SELECT tenant_id, count(*) AS files, sum(size) AS bytes
                  FROM new_rows GROUP BY tenant_id) d;
    ELSE  -- UPDATE: files stay, bytes change by new size - old size
        SELECT jsonb_agg(d) INTO deltas
          FROM (SELECT tenant_id, 0 AS files, sum(b) AS bytes
                  FROM (SELECT tenant_id, size::bigint AS b FROM new_rows
                        UNION ALL SELECT tenant_id, -size::bigint FROM old_rows) x
                 GROUP BY tenant_id) d;
    END IF;
    FOR r IN
        WITH delta AS (
            SELECT * FROM jsonb_to_recordset(coalesce(deltas, '[]'))
                       AS x(tenant_id text, files bigint, bytes bigint)),
        grown AS (
            INSERT INTO tenant_usage AS u (tenant_id, files, bytes)
            SELECT tenant_id, files, bytes FROM delta WHERE files <> 0 OR bytes <> 0
            ON CONFLICT (tenant_id) DO UPDATE
               SET files = u.files + EXCLUDED.files, bytes = u.bytes + EXCLUDED.bytes
            RETURNING u.tenant_id, u.files, u.bytes)
        SELECT g.tenant_id, g.files, g.bytes, d.files AS added_files, d.bytes AS added_bytes
          FROM grown g JOIN delta d USING (tenant_id)
    LOOP
        IF r.added_files > 0 AND r.files > max_files THEN
            RAISE EXCEPTION 'tenant % would have % files, more than its quota of % (HANGO_TENANT_MAX_FILES); nothing was written', r.tenant_id, r.files, max_files
                USING ERRCODE = 'check_violation', CONSTRAINT = 'hango_quota_files';
        END IF;
        IF r.added_bytes > 0 AND r.bytes > max_bytes THEN
            RAISE EXCEPTION 'tenant % would hold % bytes, more than its quota of % (HANGO_TENANT_MAX_BYTES); nothing was written', r.tenant_id, r.bytes, max_bytes
                USING ERRCODE = 'check_violation', CONSTRAINT = 'hango_quota_bytes';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- The first time the triggers are made, count what is already there (with writers held off, so
-- nothing slips between the count and the triggers).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'agent_files_usage_insert'
                                              AND tgrelid = 'agent_files'::regclass) THEN
        LOCK TABLE agent_files IN SHARE ROW EXCLUSIVE MODE;
        INSERT INTO tenant_usage (tenant_id, files, bytes)
        SELECT tenant_id, count(*), coalesce(sum(size), 0) FROM agent_files GROUP BY tenant_id
        ON CONFLICT (tenant_id) DO UPDATE SET files = EXCLUDED.files, bytes = EXCLUDED.bytes;
    END IF;
END
$$;
CREATE OR REPLACE TRIGGER agent_files_usage_insert AFTER INSERT ON agent_files
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hango_tenant_usage();
CREATE OR REPLACE TRIGGER agent_files_usage_update AFTER UPDATE ON agent_files
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hango_tenant_usage();
CREATE OR REPLACE TRIGGER agent_files_usage_delete AFTER DELETE ON agent_files
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hango_tenant_usage();

-- ==== tokens, SECURITY DEFINER functions, grants, schema version (h2: issue 10.2, 10.7, 14.5) ====
-- Tokens have an id (what `hango token list` shows; never the secret), an optional expiry and
-- the time of their last use. Revoking a token deletes its row: it is 401 at once.
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS token_id text NOT NULL
    DEFAULT pg_catalog.left(pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''), 16);
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS expires_at timestamptz;
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS last_used_at timestamptz;
CREATE UNIQUE INDEX IF NOT EXISTS api_tokens_token_id ON api_tokens (token_id);
CREATE INDEX IF NOT EXISTS api_tokens_tenant ON api_tokens (tenant_id);

-- The app role reads api_tokens only through these SECURITY DEFINER functions. Each runs as the
-- schema's owner, so each is pinned as PostgreSQL's "Writing SECURITY DEFINER Functions Safely"
-- says: search_path = pg_catalog, public, pg_temp (pg_temp LAST, else a session's temporary
-- table or view named api_tokens would be found first), and every table is schema-qualified.
-- hango_principal: the tenant and role of a live (unexpired) token, and its last use recorded at
-- most once a minute, so that authenticating is not a write per request.
CREATE OR REPLACE FUNCTION public.hango_principal(digest bytea)
    RETURNS TABLE (tenant_id text, role text)
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
    WITH touched AS (
        UPDATE public.api_tokens t SET last_used_at = pg_catalog.now()
         WHERE t.token_sha256 = digest
           AND (t.expires_at IS NULL OR t.expires_at > pg_catalog.now())
           AND (t.last_used_at IS NULL OR t.last_used_at < pg_catalog.now() - interval '1 minute')
        RETURNING 1
    )
    SELECT t.tenant_id, t.role FROM public.api_tokens t
     WHERE t.token_sha256 = digest
       AND (t.expires_at IS NULL OR t.expires_at > pg_catalog.now())
$$;

-- An owner manages the tokens of its own tenant over the API. The caller is named by its own
-- token's digest, never by a tenant id the session could set: without a live owner token these
-- functions see nothing and change nothing.
CREATE OR REPLACE FUNCTION public.hango_owner_tenant(caller bytea)
    RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT o.tenant_id FROM public.api_tokens o
     WHERE o.token_sha256 = caller AND o.role = 'owner'
       AND (o.expires_at IS NULL OR o.expires_at > pg_catalog.now())
$$;

CREATE OR REPLACE FUNCTION public.hango_token_list(caller bytea)
    RETURNS TABLE (token_id text, role text, label text, created_at timestamptz,
                   last_used_at timestamptz, expires_at timestamptz)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT t.token_id, t.role, t.label, t.created_at, t.last_used_at, t.expires_at
      FROM public.api_tokens t
     WHERE t.tenant_id = public.hango_owner_tenant(caller)
     ORDER BY t.created_at, t.token_id
     LIMIT 1000
$$;

-- The last live owner token of a tenant is not revoked (a check_violation, CONSTRAINT
-- hango_last_owner): nobody could manage the tenant over the API after it. Revokes of one tenant
-- queue on its row (FOR NO KEY UPDATE: the foreign keys' KEY SHARE of new agents is not held up),
-- so two owners revoking each other cannot both win.
CREATE OR REPLACE FUNCTION public.hango_token_revoke(caller bytea, id text)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    owned text := public.hango_owner_tenant(caller);
BEGIN
    IF owned IS NULL THEN
        RETURN NULL;  -- the caller is not a live owner (revoked or expired since it was checked)
    END IF;
    -- one revoke per tenant at a time (a lock of its own: the tenant's row is behind RLS, and
    -- this function's owner sees no tenant), so two owners revoking each other leave one
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtextextended('hango token revoke/' || owned, 0));
    IF EXISTS (SELECT 1 FROM public.api_tokens t
                WHERE t.tenant_id = owned AND t.token_id = id AND t.role = 'owner'
                  AND (t.expires_at IS NULL OR t.expires_at > pg_catalog.now()))
       AND NOT EXISTS (SELECT 1 FROM public.api_tokens o
                        WHERE o.tenant_id = owned AND o.token_id <> id AND o.role = 'owner'
                          AND (o.expires_at IS NULL OR o.expires_at > pg_catalog.now())) THEN
        RAISE EXCEPTION 'token % is the last owner token of this tenant: without it nobody could manage the tenant over the API; create another owner token first, then revoke this one (an administrator can still revoke it: hango token revoke)', id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'hango_last_owner';
    END IF;
    DELETE FROM public.api_tokens t WHERE t.tenant_id = owned AND t.token_id = id;
    RETURN FOUND;
END
$$;

-- Returns the new token's row, or nothing when the caller is not a live owner. At most 1,000
-- tokens a tenant (the listing's bound): the tenant's row is locked so that concurrent creates
-- cannot overshoot.
CREATE OR REPLACE FUNCTION public.hango_token_create(
        caller bytea, digest bytea, id text, new_role text, new_label text, expires timestamptz)
    RETURNS TABLE (token_id text, role text, label text, created_at timestamptz,
                   last_used_at timestamptz, expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    owned text := public.hango_owner_tenant(caller);
BEGIN
    IF owned IS NULL THEN
        RETURN;
    END IF;
    -- one create per tenant at a time (a lock of its own: the tenant's row is behind RLS)
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtextextended('hango_token_create/' || owned, 0));
    IF (SELECT pg_catalog.count(*) FROM public.api_tokens t WHERE t.tenant_id = owned) >= 1000 THEN
        RAISE EXCEPTION 'tenant % already has 1000 tokens (the cap); revoke some first', owned
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN QUERY
    INSERT INTO public.api_tokens AS t
           (token_sha256, tenant_id, role, label, token_id, expires_at)
    VALUES (digest, owned, new_role, new_label, id, expires)
    RETURNING t.token_id, t.role, t.label, t.created_at, t.last_used_at, t.expires_at;
END
$$;

-- hango_read_file: the files API's plain GET in one statement, as the app role (NOT a SECURITY
-- DEFINER: row-level security applies to the read). It takes the role hango_app for this
-- transaction itself (the caller may be the URL's role: one statement, no SET before it). Who
-- the token is comes from hango_principal (an unknown, revoked or expired token is nobody: no
-- row); that tenant is set for this transaction only, and the first `cap` bytes of one file are
-- read as it. A row with a NULL content: the token is live, the file is not there.
CREATE OR REPLACE FUNCTION public.hango_read_file(digest bytea, agent text, file_path text,
                                                  cap integer)
    RETURNS TABLE (tenant_id text, role text, content bytea, version bigint, size integer)
    LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM pg_catalog.set_config('role', 'hango_app', true);
    SELECT p.tenant_id, p.role INTO tenant_id, role FROM public.hango_principal(digest) p;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_catalog.set_config('hango.tenant_id', hango_read_file.tenant_id, true);
    SELECT substring(f.content FROM 1 FOR cap), f.version, f.size INTO content, version, size
      FROM public.agent_files f
     WHERE f.tenant_id = hango_read_file.tenant_id AND f.agent_id = agent
       AND f.path = file_path;
    RETURN NEXT;
END
$$;

-- Functions are executable by PUBLIC unless revoked: only hango_app (and the owner) call these.
REVOKE ALL ON FUNCTION public.hango_principal(bytea), public.hango_owner_tenant(bytea),
    public.hango_token_list(bytea), public.hango_token_revoke(bytea, text),
    public.hango_token_create(bytea, bytea, text, text, text, timestamptz),
    public.hango_read_file(bytea, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION public.hango_principal(bytea), public.hango_owner_tenant(bytea),
    public.hango_token_list(bytea), public.hango_token_revoke(bytea, text),
    public.hango_token_create(bytea, bytea, text, text, text, timestamptz),
    public.hango_read_file(bytea, text, text, integer) TO hango_app;

-- No temporary objects and no new objects in public for the app role (nor for PUBLIC, where the
-- role applying this schema owns the database: elsewhere REVOKE only warns, and the pinned
-- search_path above still holds). A session of hango_app can then shadow nothing.
DO $$
BEGIN
    EXECUTE pg_catalog.format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC, hango_app',
                              pg_catalog.current_database());
    REVOKE CREATE ON SCHEMA public FROM PUBLIC, hango_app;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'hango: could not revoke TEMPORARY/CREATE from PUBLIC (%): the role applying '
                  'the schema does not own the database', SQLERRM;
END
$$;

-- On a server where the role applying this schema is not a superuser (HANGO_DATABASE_URL on a
-- managed service, a role with CREATEROLE), it created hango_app and so holds ADMIN OPTION on
-- it; since PostgreSQL 16 that alone does not allow SET ROLE hango_app, which the app needs.
DO $$
BEGIN
    IF pg_catalog.current_setting('server_version_num')::int >= 160000 THEN
        IF NOT pg_catalog.pg_has_role(current_user, 'hango_app', 'SET') THEN
            EXECUTE pg_catalog.format('GRANT hango_app TO %I WITH INHERIT FALSE, SET TRUE',
                                      current_user);
        END IF;
    ELSIF NOT pg_catalog.pg_has_role(current_user, 'hango_app', 'MEMBER') THEN
        EXECUTE pg_catalog.format('GRANT hango_app TO %I', current_user);
    END IF;
END
$$;

-- Which schema.sql this database has: Database.apply_schema compares a SHA-256 of this file
-- with this row in one query and runs no DDL (and takes no lock) when they match.
CREATE TABLE IF NOT EXISTS hango_schema (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version    text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON hango_schema FROM PUBLIC, hango_app;
-- ==== end of h2 section ====

-- === Agent-written memory under approval (issue 13): runs and proposals =================
-- (restored: the merge of h8-perf dropped this section; hango/agent/runs.py and proposals.py need it)
-- A run that stopped "interrupted" keeps its state here (messages so far, the pending tool call),
-- so any process can resume it. A proposal is an agent's write under /memories/ or /skills/ in
-- "ask" mode: never executed until an owner or admin approves it. Both tables are under RLS.
CREATE TABLE IF NOT EXISTS runs (
    tenant_id   text NOT NULL,
    agent_id    text NOT NULL,
    run_id      text NOT NULL CHECK (run_id ~ '^[A-Za-z0-9._-]{1,128}$'),
    status      text NOT NULL CHECK (status IN ('interrupted', 'resuming', 'done', 'failed')),
    state       json,             -- what resume needs; NULL once the run has ended
    result      json NOT NULL DEFAULT '{}',  -- text, usage per model call, warnings, error
    proposal_id text,             -- what an interrupted run waits for
    claimed_at  timestamptz,      -- when the resume in progress took its claim
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents ON DELETE CASCADE
);

CREATE TABLE IF NOT EXISTS proposals (
    tenant_id       text NOT NULL,
    agent_id        text NOT NULL,
    proposal_id     text NOT NULL CHECK (proposal_id ~ '^[A-Za-z0-9._-]{1,200}$'),
    run_id          text NOT NULL,
    call_id         text NOT NULL,
    path            text COLLATE "C" NOT NULL CHECK (path LIKE '/memories/%' OR path LIKE '/skills/%'),
    operation       text NOT NULL CHECK (operation IN ('write_file', 'edit_file')),
    base_version    bigint,       -- the file's version it was made against; NULL: a new file
    content         bytea NOT NULL,
    skill           jsonb,        -- a proposed SKILL.md: {name, error, dropped_tools}
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'rejected')),
    decided_by      text,
    decided_at      timestamptz,
    reason          text,
    edited          boolean NOT NULL DEFAULT false,
    written_version bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, proposal_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS proposals_pending
    ON proposals (tenant_id, agent_id, created_at) WHERE status = 'pending';

ALTER TABLE runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE proposals ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON runs;
CREATE POLICY tenant_isolation ON runs
    USING (tenant_id = current_setting('hango.tenant_id', true));
DROP POLICY IF EXISTS tenant_isolation ON proposals;
CREATE POLICY tenant_isolation ON proposals
    USING (tenant_id = current_setting('hango.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON runs, proposals TO hango_app;

-- ===== before_run change counter (issue 14) ========================================================
-- One row per agent whose memory or skills files were ever written: `counter` takes a fresh value
-- of a global sequence in the SAME transaction as every INSERT, UPDATE (path moves included) or
-- DELETE of a row under /memories/ or /skills/, whoever writes it (files API, agent tools, the
-- backend, another process, plain SQL): a trigger, not application code. before_run reads it first
-- and reuses its parsed memory and skills index while it has not moved. A sequence, not +1: an
-- agent deleted and created again never gets back a counter value a cache may still hold.
CREATE SEQUENCE IF NOT EXISTS agent_changes_seq;
CREATE TABLE IF NOT EXISTS agent_changes (
    tenant_id text NOT NULL,
    agent_id  text NOT NULL,
    counter   bigint NOT NULL,
    PRIMARY KEY (tenant_id, agent_id),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents ON DELETE CASCADE
);
ALTER TABLE agent_changes ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON agent_changes;
CREATE POLICY tenant_isolation ON agent_changes
    USING (tenant_id = current_setting('hango.tenant_id', true));

-- SECURITY DEFINER: the app role fires it but may only READ agent_changes (it cannot forge or
-- reset a counter). The EXISTS skips agents being deleted (their files go by cascade, and the
-- counter row with them).
CREATE OR REPLACE FUNCTION hango_bump_changes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
    AS $$
DECLARE
    side record;
BEGIN
    FOR side IN
        SELECT OLD.tenant_id AS t, OLD.agent_id AS a, OLD.path AS p WHERE TG_OP <> 'INSERT'
        UNION
        SELECT NEW.tenant_id, NEW.agent_id, NEW.path WHERE TG_OP <> 'DELETE'
    LOOP
        IF side.p LIKE '/memories/%' OR side.p LIKE '/skills/%' THEN
            INSERT INTO public.agent_changes (tenant_id, agent_id, counter)
                SELECT side.t, side.a, pg_catalog.nextval('public.agent_changes_seq')
                 WHERE EXISTS (SELECT 1 FROM public.agents g
                                WHERE g.tenant_id = side.t AND g.agent_id = side.a)
            ON CONFLICT (tenant_id, agent_id) DO UPDATE SET counter = EXCLUDED.counter;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS agent_files_changes ON agent_files;
CREATE TRIGGER agent_files_changes AFTER INSERT OR UPDATE OR DELETE ON agent_files
    FOR EACH ROW EXECUTE FUNCTION hango_bump_changes();
-- TRUNCATE fires no row trigger: move every counter.
CREATE OR REPLACE FUNCTION hango_bump_all_changes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
    AS $$ BEGIN UPDATE public.agent_changes SET counter = pg_catalog.nextval('public.agent_changes_seq'); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS agent_files_truncated ON agent_files;
CREATE TRIGGER agent_files_truncated AFTER TRUNCATE ON agent_files
    FOR EACH STATEMENT EXECUTE FUNCTION hango_bump_all_changes();
-- Files written before this trigger existed: give their agents a counter (no row means 0).
INSERT INTO agent_changes (tenant_id, agent_id, counter)
    SELECT DISTINCT ON (tenant_id, agent_id) tenant_id, agent_id, nextval('agent_changes_seq')
      FROM agent_files WHERE path LIKE '/memories/%' OR path LIKE '/skills/%'
    ON CONFLICT DO NOTHING;
REVOKE ALL ON agent_changes FROM hango_app;
GRANT SELECT ON agent_changes TO hango_app;

-- ===== skills heads cut at write time (issue 14) ===================================================
-- The skills scan reads only each SKILL.md's frontmatter. Cutting it per row at every scan
-- (substring + position over a TOASTed 2 KiB file) cost 10 ms for 1,000 skills; a small `head`
-- column computed once, when the file is written (by any door: it is a generated column), costs
-- 1 ms to read. The cut is the one `PostgresBackend.heads` makes with the skills middleware's
-- arguments: the first 16384 bytes (frontmatter.HEAD_BYTES), ended after the first line that
-- is exactly `---` (skills.FENCES). NULL for every other file. A test checks both give the same.
-- The function's name carries its version: a new cut needs a new function and column.
CREATE OR REPLACE FUNCTION hango_skill_head_v1(path text, content bytea) RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN path LIKE '%/SKILL.md' THEN (
        SELECT CASE WHEN c.cut IS NULL THEN h.head ELSE substring(h.head FROM 1 FOR c.cut) END
          FROM (SELECT substring(content FROM 1 FOR 16384) AS head) AS h,
               LATERAL (SELECT min(position(m IN h.head) + length(m) - 1) AS cut
                          FROM unnest(ARRAY['\x0a2d2d2d0a'::bytea, '\x0a2d2d2d0d0a'::bytea]) AS m
                         WHERE position(m IN h.head) > 0) AS c)
    END
    $$;
ALTER TABLE agent_files ADD COLUMN IF NOT EXISTS skill_head bytea
    GENERATED ALWAYS AS (hango_skill_head_v1(path, content)) STORED;

-- ===== a learner's progress: the exercises they passed ==============================================
-- check() records each exercise a learner passed (hango/exercises/progress.py). Keyed by the
-- learner (HANGO_LEARNER, or the login name), not by a tenant: every notebook drops and recreates
-- its own tenant at its first cell, and that must not wipe what its learner has passed. No tenant
-- data lives here, so there is no tenant to filter by: the app role may read, record and forget.
CREATE TABLE IF NOT EXISTS exercise_passes (
    learner     text NOT NULL CHECK (learner ~ '^[A-Za-z0-9._@-]{1,64}$'),
    exercise_id text NOT NULL CHECK (exercise_id ~ '^[0-9]{2}\.[0-9]{1,2}$'),
    passed_at   timestamptz NOT NULL DEFAULT now(),
    verified    text NOT NULL CHECK (length(verified) <= 2000),
    PRIMARY KEY (learner, exercise_id)
);
REVOKE ALL ON exercise_passes FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON exercise_passes TO hango_app;
-- ===== resumes that run each saved call once; who proposed; the proposals listing's order =========
-- A run's state and result are json, not jsonb: what a run read or a model answered may hold
-- U+0000, which json keeps as the escape \u0000 and jsonb (like text) refuses. hango stores and
-- loads them whole and never queries inside them. (Databases made with jsonb are converted once.)
DO $$
BEGIN
    IF (SELECT a.atttypid FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = 'public.runs'::regclass AND a.attname = 'state') = 'jsonb'::regtype THEN
        ALTER TABLE public.runs ALTER COLUMN result DROP DEFAULT,
            ALTER COLUMN state TYPE json USING state::json,
            ALTER COLUMN result TYPE json USING result::json,
            ALTER COLUMN result SET DEFAULT '{}';
    END IF;
END
$$;
-- A resume's claim is a lease: the resume holding claim_token renews claim_expires_at while it
-- runs (every third of HANGO_RUN_LEASE_SECONDS); once it has passed, another resume may take over.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS claim_token text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS claim_expires_at timestamptz;
-- The saved calls a resume has run (the rest of the interrupted turn, then each turn it saved):
-- a row per call, with its result, committed with the call's effect when that is a file write.
-- A later resume runs only the calls that have no row here.
CREATE TABLE IF NOT EXISTS run_calls (
    tenant_id text NOT NULL,
    run_id    text NOT NULL,
    call_id   text NOT NULL,
    result    json NOT NULL,
    PRIMARY KEY (tenant_id, run_id, call_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs ON DELETE CASCADE
);
ALTER TABLE run_calls ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON run_calls;
CREATE POLICY tenant_isolation ON run_calls
    USING (tenant_id = current_setting('hango.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON run_calls TO hango_app;
-- Who started the run that proposed ("member:<token fingerprint>"; NULL: a run started in code):
-- a member's runs may hold only HANGO_PROPOSALS_MAX_PENDING_PER_MEMBER of an agent's pending ones.
ALTER TABLE proposals ADD COLUMN IF NOT EXISTS proposed_by text;
-- The listing pages by (created_at, proposal_id), oldest first.
CREATE INDEX IF NOT EXISTS proposals_listing ON proposals (tenant_id, agent_id, created_at, proposal_id);
-- ===== retention of runs and proposals (hango/retention.py) =======================================
-- A sweep deletes ended runs past HANGO_RUNS_KEEP_DAYS or beyond the newest HANGO_RUNS_KEEP_MAX of
-- a tenant (their proposals go with them, by the foreign key's cascade), and then writes the
-- tenant's count of runs and their bytes here, with when it swept. Counted at the sweep, not by
-- a trigger: a trigger would lock this row in every run's transaction.
ALTER TABLE tenant_usage ADD COLUMN IF NOT EXISTS runs bigint NOT NULL DEFAULT 0;
ALTER TABLE tenant_usage ADD COLUMN IF NOT EXISTS run_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE tenant_usage ADD COLUMN IF NOT EXISTS runs_swept_at timestamptz;
CREATE INDEX IF NOT EXISTS runs_ended ON runs (tenant_id, updated_at)
    WHERE status IN ('done', 'failed');
-- The cascade from a deleted run finds its proposals by this index, not by a scan of them all.
CREATE INDEX IF NOT EXISTS proposals_run ON proposals (tenant_id, run_id);
-- ===== row-level security for the owner too (keep this section LAST) ===========================
-- The tables' owner (the URL's role on a managed server) is held by the same policies as the app
-- role: FORCE on every table that has row-level security, so a transaction of the owner sees
-- only the tenant it set. What the owner does across tenants (provisioning many, the schema's
-- upgrade steps, a sweep) it says so: hango.all_tenants = 'on' for the transaction, honoured
-- only for the owner (Database.admin(all_tenants=True)); hango_app setting it gains nothing.
-- A superuser (the embedded server's admin) bypasses row-level security whatever is set.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT c.relname, pg_catalog.pg_get_userbyid(c.relowner) AS owner
               FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
                AND c.relrowsecurity
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', t.relname);
        EXECUTE pg_catalog.format('DROP POLICY IF EXISTS hango_all_tenants ON public.%I',
                                  t.relname);
        EXECUTE pg_catalog.format(
            'CREATE POLICY hango_all_tenants ON public.%I TO %I'
            ' USING (pg_catalog.current_setting(''hango.all_tenants'', true) = ''on'')',
            t.relname, t.owner);
    END LOOP;
END
$$;
