-- The files: tenants, their agents, and the one table every file lives in. Memory and skills add
-- no table: they are rows of agent_files under /memories/ and /skills/. Row-level security holds
-- every tenant to its own rows, behind the WHERE tenant_id = ... of every query: two locks.
--
-- Every file of hango/schema/ is applied in name order, once per schema version, and each
-- statement is idempotent (an upgrade applies them again after its steps: hango/upgrades.py).

-- The role the application runs as: no superuser, no BYPASSRLS, owns nothing.
DO $$
BEGIN
    CREATE ROLE hango_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
EXCEPTION WHEN duplicate_object THEN
    NULL;  -- roles are cluster-wide: another database (or process) made it first
END
$$;

-- Where the role applying this schema is not a superuser (HANGO_DATABASE_URL on a managed
-- service, a role with CREATEROLE), it created hango_app and so holds ADMIN OPTION on it; since
-- PostgreSQL 16 that alone does not allow SET ROLE hango_app, which every transaction of the app
-- takes.
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

-- A tenant's defaults, set by an owner (hango.agent_config.TenantDefaults): memory sources,
-- skills sources, reserved-writes mode, for its agents whose own config names none; a key left
-- out falls back to the server's HANGO_MEMORY_DEFAULT_SOURCES, HANGO_SKILLS_DEFAULT_SOURCES,
-- HANGO_RESERVED_WRITES.
CREATE TABLE IF NOT EXISTS tenants (
    tenant_id  text PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    defaults   jsonb NOT NULL DEFAULT '{}'
);

-- Per-agent config: tool allowlist, memory sources, skills sources (validated by the API).
CREATE TABLE IF NOT EXISTS agents (
    tenant_id  text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    agent_id   text NOT NULL CHECK (agent_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    config     jsonb NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id)
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
    -- who wrote this version (the caller's role and token fingerprint; NULL: written in code),
    -- the approved proposal it came from, the version a restore copied (50-history.sql)
    written_by    text,
    proposal_id   text,
    restored_from bigint,
    PRIMARY KEY (tenant_id, agent_id, path),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents ON DELETE CASCADE
);
ALTER TABLE agent_files ALTER COLUMN content SET STORAGE EXTERNAL;

-- The skills scan: one index holding only SKILL.md rows, so 10,000 other files cost nothing.
CREATE INDEX IF NOT EXISTS agent_files_skill_md
    ON agent_files (tenant_id, agent_id, path)
    WHERE path LIKE '%/SKILL.md';

-- Row-level security: every statement runs with hango.tenant_id set (SET LOCAL), so a missing
-- WHERE clause still cannot reach another tenant's rows.
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_files ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON tenants;
CREATE POLICY tenant_isolation ON tenants
    USING (tenant_id = current_setting('hango.tenant_id', true));
DROP POLICY IF EXISTS tenant_isolation ON agents;
CREATE POLICY tenant_isolation ON agents
    USING (tenant_id = current_setting('hango.tenant_id', true));
DROP POLICY IF EXISTS tenant_isolation ON agent_files;
CREATE POLICY tenant_isolation ON agent_files
    USING (tenant_id = current_setting('hango.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON tenants, agents, agent_files TO hango_app;
