-- hango's whole schema. Applied at every start; every statement is idempotent.
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

CREATE OR REPLACE FUNCTION hango_principal(digest bytea)
    RETURNS TABLE (tenant_id text, role text)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public
    AS $$ SELECT t.tenant_id, t.role FROM api_tokens t WHERE t.token_sha256 = digest $$;

REVOKE ALL ON api_tokens FROM hango_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON agents, agent_files, tenants TO hango_app;
GRANT EXECUTE ON FUNCTION hango_principal(bytea) TO hango_app;

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
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public
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
            INSERT INTO agent_changes (tenant_id, agent_id, counter)
                SELECT side.t, side.a, nextval('agent_changes_seq')
                 WHERE EXISTS (SELECT 1 FROM agents g
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
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public
    AS $$ BEGIN UPDATE agent_changes SET counter = nextval('agent_changes_seq'); RETURN NULL; END $$;
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
