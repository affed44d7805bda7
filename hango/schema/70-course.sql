-- The course: the exercises a learner passed.
--
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

-- On a shared server, each learner's exercise checks: a learner whose notebooks name the server
-- (HANGO_SERVER_URL, HANGO_TOKEN) sends each check there (PUT /v1/progress). One row per seat
-- (the learner's tenant) and exercise, with the first pass and the last try, so it is bounded by
-- the course's exercises. `hango workshop room` reads them beside the runs and proposals of
-- every seat. (On a laptop, passes are kept in exercise_passes, above.)
CREATE TABLE IF NOT EXISTS learner_checks (
    tenant_id     text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    exercise_id   text NOT NULL CHECK (exercise_id ~ '^[0-9]{2}\.[0-9]{1,2}$'),
    tries         integer NOT NULL DEFAULT 1 CHECK (tries >= 1),
    passed_at     timestamptz,  -- the first pass; NULL: not passed yet
    verified      text CHECK (length(verified) <= 2000),  -- what the first pass verified
    last_tried_at timestamptz NOT NULL DEFAULT now(),
    last_passed   boolean NOT NULL,
    last_message  text NOT NULL DEFAULT '' CHECK (length(last_message) <= 2000),
    PRIMARY KEY (tenant_id, exercise_id)
);
ALTER TABLE learner_checks ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON learner_checks;
CREATE POLICY tenant_isolation ON learner_checks
    USING (tenant_id = current_setting('hango.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON learner_checks TO hango_app;
