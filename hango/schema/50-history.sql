-- Memory history and undo. Every write under /memories/ or /skills/ (hango/fs/writes.py, the one write path:
-- PUT, PATCH, DELETE, approve, restore) first copies the file's current version here, so a
-- poisoned memory can be undone. At most HANGO_HISTORY_MAX_VERSIONS versions a file (the oldest
-- go at the next write); a deleted file keeps its history (its last version is marked
-- deleted_at), and only deleting the agent or the tenant removes it (the foreign key's cascade).
-- A file created again continues the numbering after its history, so a version number is never
-- reused. Who wrote a version is kept with it: the caller (role and token fingerprint), the
-- proposal it came from, or the version it restored.
CREATE TABLE IF NOT EXISTS agent_file_versions (
    tenant_id     text NOT NULL,
    agent_id      text NOT NULL,
    path          text COLLATE "C" NOT NULL
                  CHECK (path LIKE '/memories/%' OR path LIKE '/skills/%'),
    version       bigint NOT NULL,
    content       bytea NOT NULL,
    size          integer NOT NULL,
    written_at    timestamptz NOT NULL,
    written_by    text,            -- "owner:<token fingerprint>"; NULL: written in code
    proposal_id   text,            -- the approved proposal that wrote it
    restored_from bigint,          -- the version a restore copied
    deleted_at    timestamptz,     -- set on a file's last version when the file was deleted
    deleted_by    text,
    PRIMARY KEY (tenant_id, agent_id, path, version),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents ON DELETE CASCADE
);
ALTER TABLE agent_file_versions ALTER COLUMN content SET STORAGE EXTERNAL;
ALTER TABLE agent_file_versions ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON agent_file_versions;
CREATE POLICY tenant_isolation ON agent_file_versions
    USING (tenant_id = current_setting('hango.tenant_id', true));
GRANT SELECT, INSERT, DELETE ON agent_file_versions TO hango_app;

-- History counts in the tenant's bytes quota: its bytes are added to tenant_usage.bytes (and
-- shown apart in history_bytes, history_versions), by statement triggers as for agent_files.
-- Only a statement that adds history while the write's quota is set (hango.tenant_max_bytes:
-- hango.fs.writes.writing) can be refused; a delete sets none (it moves the file's bytes into
-- its history), and pruning only subtracts.
CREATE OR REPLACE FUNCTION hango_history_usage() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    max_bytes bigint := nullif(current_setting('hango.tenant_max_bytes', true), '')::bigint;
    r record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE tenant_usage u SET bytes = u.bytes - d.bytes, history_bytes = u.history_bytes - d.bytes,
                                  history_versions = u.history_versions - d.n
          FROM (SELECT tenant_id, count(*) AS n, sum(size) AS bytes FROM old_rows GROUP BY tenant_id) d
         WHERE u.tenant_id = d.tenant_id;
        RETURN NULL;
    END IF;
    FOR r IN
        INSERT INTO tenant_usage AS u (tenant_id, bytes, history_bytes, history_versions)
        SELECT tenant_id, sum(size), sum(size), count(*) FROM new_rows GROUP BY tenant_id
        ON CONFLICT (tenant_id) DO UPDATE
           SET bytes = u.bytes + EXCLUDED.bytes, history_bytes = u.history_bytes + EXCLUDED.bytes,
               history_versions = u.history_versions + EXCLUDED.history_versions
        RETURNING u.tenant_id, u.bytes, u.history_bytes
    LOOP
        IF r.bytes > max_bytes THEN
            RAISE EXCEPTION 'tenant % would hold % bytes (its files and, of those, % bytes of their earlier versions under /memories/ and /skills/, HANGO_HISTORY_MAX_VERSIONS a file), more than its quota of % (HANGO_TENANT_MAX_BYTES); nothing was written', r.tenant_id, r.bytes, r.history_bytes, max_bytes
                USING ERRCODE = 'check_violation', CONSTRAINT = 'hango_quota_bytes';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER agent_file_versions_usage_insert AFTER INSERT ON agent_file_versions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hango_history_usage();
CREATE OR REPLACE TRIGGER agent_file_versions_usage_delete AFTER DELETE ON agent_file_versions
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hango_history_usage();
