-- Integrity the database keeps whoever writes: a file and a directory never share a name, and
-- each tenant stays within its quota of files and bytes.

-- File or directory. "/notes" may be a file or a directory, never both. A row trigger checks
-- every new path: no ancestor ("/notes" for "/notes/x") may be a file, and no file may lie under
-- the path itself (the C-collated range ["/notes/", "/notes0") of the primary key). A check alone
-- would race: two writers of "/notes" and "/notes/x" could each see nothing and both commit.
-- Every such conflict is between two paths with the same first segment, so the trigger first
-- takes a transaction-scoped advisory lock on (tenant, agent, first segment): exactly the writers
-- that could conflict queue, everyone else runs in parallel. Under READ COMMITTED each query in
-- the trigger takes a fresh snapshot, so once the lock is granted it sees what the previous
-- holder committed. The error is an exclusion_violation (23P01) with CONSTRAINT
-- agent_files_file_or_directory; the backend turns it into PathConflict.
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

-- Quotas. One row per tenant holds its file count and bytes, kept by statement triggers on
-- agent_files (one update per statement, from its transition tables, so a bulk INSERT of 200,000
-- rows costs one update, not 200,000). A statement that adds files or bytes updates the row,
-- which locks it until commit: concurrent writers of one tenant queue on it, and each adds to
-- what the previous one committed, so no interleaving can overshoot. The limits are the backend's
-- settings (HANGO_TENANT_MAX_FILES, HANGO_TENANT_MAX_BYTES), set for the write's transaction as
-- hango.tenant_max_files and hango.tenant_max_bytes; unset (an administrator's bulk load), the
-- usage is counted but not limited. Only a statement that *grows* a tenant over its quota is
-- refused: deleting or shrinking always works. The error is a check_violation (23514) with
-- CONSTRAINT hango_quota_files or hango_quota_bytes.
--
-- runs, run_bytes and runs_swept_at are written by the retention sweep (hango/retention.py): it
-- deletes ended runs past HANGO_RUNS_KEEP_DAYS or beyond the newest HANGO_RUNS_KEEP_MAX of a
-- tenant, then counts what is left, with when it swept. Counted at the sweep, not by a trigger: a
-- trigger would lock this row in every run's transaction.
CREATE TABLE IF NOT EXISTS tenant_usage (
    tenant_id     text PRIMARY KEY REFERENCES tenants ON DELETE CASCADE,
    files         bigint NOT NULL DEFAULT 0,
    bytes         bigint NOT NULL DEFAULT 0,
    runs          bigint NOT NULL DEFAULT 0,
    run_bytes     bigint NOT NULL DEFAULT 0,
    runs_swept_at timestamptz,
    -- of bytes, those of files' earlier versions under /memories/ and /skills/ (50-history.sql)
    history_versions bigint NOT NULL DEFAULT 0,
    history_bytes    bigint NOT NULL DEFAULT 0
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

CREATE OR REPLACE TRIGGER agent_files_usage_insert AFTER INSERT ON agent_files
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hango_tenant_usage();
CREATE OR REPLACE TRIGGER agent_files_usage_update AFTER UPDATE ON agent_files
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hango_tenant_usage();
CREATE OR REPLACE TRIGGER agent_files_usage_delete AFTER DELETE ON agent_files
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hango_tenant_usage();
