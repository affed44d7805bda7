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

-- === Agent-written memory under approval (issue 13): runs and proposals ========================
-- A run that stopped "interrupted" keeps its state here (messages so far, the pending tool call),
-- so any process can resume it. A proposal is an agent's write under /memories/ or /skills/ in
-- "ask" mode: never executed until an owner or admin approves it. Both tables are under RLS.
CREATE TABLE IF NOT EXISTS runs (
    tenant_id   text NOT NULL,
    agent_id    text NOT NULL,
    run_id      text NOT NULL CHECK (run_id ~ '^[A-Za-z0-9._-]{1,128}$'),
    status      text NOT NULL CHECK (status IN ('interrupted', 'resuming', 'done', 'failed')),
    state       jsonb,            -- what resume needs; NULL once the run has ended
    result      jsonb NOT NULL DEFAULT '{}',  -- text, usage per model call, warnings, error
    proposal_id text,             -- what an interrupted run waits for
    claimed_at  timestamptz,      -- a resume in progress (a stale claim can be taken over)
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
