-- Runs and proposals: agent-written memory under approval, and runs served over HTTP.
--
-- A run that stopped "interrupted" keeps its state here (messages so far, the pending tool call),
-- so any process can resume it. A proposal is an agent's write under /memories/ or /skills/ in
-- "ask" mode: never executed until an owner or admin approves it. All three tables are under
-- row-level security.
--
-- A run's state and result are json, not jsonb: what a run read or a model answered may hold
-- U+0000, which json keeps as the escape \u0000 and jsonb (like text) refuses. hango stores and
-- loads them whole and never queries inside them.
--
-- A resume's claim is a lease: the resume holding claim_token renews claim_expires_at while it
-- runs (every third of HANGO_RUN_LEASE_SECONDS); once it has passed, another resume may take over.
CREATE TABLE IF NOT EXISTS runs (
    tenant_id        text NOT NULL,
    agent_id         text NOT NULL,
    run_id           text NOT NULL CHECK (run_id ~ '^[A-Za-z0-9._-]{1,128}$'),
    status           text NOT NULL CHECK (status IN ('interrupted', 'resuming', 'done', 'failed')),
    state            json,                      -- what resume needs; NULL once the run has ended
    result           json NOT NULL DEFAULT '{}',  -- text, usage per model call, warnings, error
    proposal_id      text,                      -- what an interrupted run waits for
    claimed_at       timestamptz,               -- when the resume in progress took its claim
    claim_token      text,                      -- which resume holds the claim
    claim_expires_at timestamptz,               -- until when, unless renewed
    started_by       text,                      -- "member:<token fingerprint>"; NULL: in code
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents ON DELETE CASCADE
);

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

-- proposed_by: who started the run that proposed ("member:<token fingerprint>"; NULL: a run
-- started in code); a member's runs may hold only HANGO_PROPOSALS_MAX_PENDING_PER_MEMBER of an
-- agent's pending ones.
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
    proposed_by     text,
    PRIMARY KEY (tenant_id, proposal_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS proposals_pending
    ON proposals (tenant_id, agent_id, created_at) WHERE status = 'pending';
-- The listing pages by (created_at, proposal_id), oldest first.
CREATE INDEX IF NOT EXISTS proposals_listing
    ON proposals (tenant_id, agent_id, created_at, proposal_id);

-- Retention (hango/retention.py): the sweep finds a tenant's ended runs by this index; the cascade
-- from a deleted run finds its proposals by the next one, not by a scan of them all.
CREATE INDEX IF NOT EXISTS runs_ended ON runs (tenant_id, updated_at)
    WHERE status IN ('done', 'failed');
CREATE INDEX IF NOT EXISTS proposals_run ON proposals (tenant_id, run_id);

-- The prompts of runs over HTTP: one row per model call (its request as people read it,
-- hango.models.view.request_view, with the usage and why the cache read nothing), at most
-- HANGO_RUN_PROMPT_MAX_BYTES of them per run (hango/prompts.py). They go with their run (the
-- retention sweep, hango/retention.py) and count in the tenant's run_bytes. json, not jsonb: a
-- prompt may hold U+0000. runs.started_by: who started the run ("member:<token fingerprint>"),
-- so a member sees the prompts of its own runs only.
CREATE INDEX IF NOT EXISTS runs_listing ON runs (tenant_id, agent_id, created_at, run_id);
CREATE TABLE IF NOT EXISTS run_prompts (
    tenant_id text NOT NULL,
    run_id    text NOT NULL,
    call      integer NOT NULL CHECK (call >= 1),  -- 1, 2, ... across a resumed run's parts
    view      json NOT NULL,
    bytes     integer NOT NULL,
    PRIMARY KEY (tenant_id, run_id, call),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs ON DELETE CASCADE
);
ALTER TABLE run_prompts ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON run_prompts;
CREATE POLICY tenant_isolation ON run_prompts
    USING (tenant_id = current_setting('hango.tenant_id', true));
GRANT SELECT, INSERT, DELETE ON run_prompts TO hango_app;

ALTER TABLE runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE run_calls ENABLE ROW LEVEL SECURITY;
ALTER TABLE proposals ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON runs;
CREATE POLICY tenant_isolation ON runs
    USING (tenant_id = current_setting('hango.tenant_id', true));
DROP POLICY IF EXISTS tenant_isolation ON run_calls;
CREATE POLICY tenant_isolation ON run_calls
    USING (tenant_id = current_setting('hango.tenant_id', true));
DROP POLICY IF EXISTS tenant_isolation ON proposals;
CREATE POLICY tenant_isolation ON proposals
    USING (tenant_id = current_setting('hango.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON runs, run_calls, proposals TO hango_app;
