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
