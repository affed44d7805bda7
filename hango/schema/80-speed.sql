-- The speed layer's objects: what lets before_run skip work when nothing changed, and read the
-- skills' frontmatter without cutting it at every scan. Deleting them costs speed, never a result.

-- The change counters. One row per agent whose memory or skills files were ever written, two
-- counters in it: `memories` and `skills` each take a fresh value of a global sequence in the SAME
-- transaction as every INSERT, UPDATE (path moves included) or DELETE of a row under its prefix,
-- whoever writes it (files API, agent tools, the backend, another process, plain SQL): a trigger,
-- not application code. before_run reads them first and reuses its parsed memory, and its skills
-- index, while its own counter has not moved: a memory edit re-sends no skill head. A sequence,
-- not +1: an agent deleted and created again never gets back a counter value a cache may still
-- hold. A new row starts all three at one fresh value.
--
-- After a skills change the speed layer reads only what changed: the SKILL.md rows whose `changed`
-- (the `skills` value their last write took) is newer than the counter it saw, and the paths
-- deleted or moved away since (agent_skill_deletions). `skills_since` is the oldest counter such a
-- delta can start from (the row's creation, a TRUNCATE, the deletions' prune): a cache older than
-- it reads everything. The value is taken under the row's lock, so an agent's values follow its
-- writers' commit order: a write the reader's snapshot does not see has a newer value.
CREATE SEQUENCE IF NOT EXISTS agent_changes_seq;
CREATE TABLE IF NOT EXISTS agent_changes (
    tenant_id    text NOT NULL,
    agent_id     text NOT NULL,
    memories     bigint NOT NULL,
    skills       bigint NOT NULL,
    skills_since bigint NOT NULL,
    PRIMARY KEY (tenant_id, agent_id),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents ON DELETE CASCADE
);
ALTER TABLE agent_changes ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON agent_changes;
CREATE POLICY tenant_isolation ON agent_changes
    USING (tenant_id = current_setting('hango.tenant_id', true));
REVOKE ALL ON agent_changes FROM hango_app;
GRANT SELECT ON agent_changes TO hango_app;

-- The SKILL.md paths deleted (or moved away), with the `skills` value of their last deletion (a
-- path written again stays: its row's newer `changed` says it is back). At most 256 an agent: the
-- 257th empties them and moves `skills_since` (a cache older than that reads everything once).
CREATE TABLE IF NOT EXISTS agent_skill_deletions (
    tenant_id text NOT NULL,
    agent_id  text NOT NULL,
    path      text COLLATE "C" NOT NULL,
    changed   bigint NOT NULL,
    PRIMARY KEY (tenant_id, agent_id, path),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents ON DELETE CASCADE
);
ALTER TABLE agent_skill_deletions ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON agent_skill_deletions;
CREATE POLICY tenant_isolation ON agent_skill_deletions
    USING (tenant_id = current_setting('hango.tenant_id', true));
REVOKE ALL ON agent_skill_deletions FROM hango_app;
GRANT SELECT ON agent_skill_deletions TO hango_app;

-- The `skills` value of a row's last write under /skills/ (NULL elsewhere, and for rows written
-- before this column existed: older than any `skills_since`), and the index a delta reads by:
-- SKILL.md rows alone, so that even a generic plan (which guesses a third of the rows for
-- `changed > $n`) prefers it to a scan of every SKILL.md.
ALTER TABLE agent_files ADD COLUMN IF NOT EXISTS changed bigint;
CREATE INDEX IF NOT EXISTS agent_files_skill_md_changed ON agent_files (tenant_id, agent_id, changed)
    WHERE changed IS NOT NULL AND path LIKE '%/SKILL.md';

-- One change under `path`'s prefix: its counter moved (the row made if missing), the new value
-- returned; NULL for an agent being deleted (its files go by cascade, and its counters with them).
-- Called only by the trigger below, as the owner (no PUBLIC execute; neither SECURITY DEFINER nor
-- its own search_path: each costs a setting saved and restored per row written).
CREATE OR REPLACE FUNCTION hango_change(t text, a text, path text) RETURNS bigint
    LANGUAGE plpgsql  -- not sql: PL/pgSQL keeps its plan between rows
    AS $$
DECLARE
    value bigint;
BEGIN
    INSERT INTO public.agent_changes AS c (tenant_id, agent_id, memories, skills, skills_since)
        SELECT t, a, n.v, n.v, n.v
          FROM (SELECT pg_catalog.nextval('public.agent_changes_seq') AS v) n
         WHERE EXISTS (SELECT 1 FROM public.agents g WHERE g.tenant_id = t AND g.agent_id = a)
    ON CONFLICT (tenant_id, agent_id) DO UPDATE SET  -- evaluated under the row's lock
        memories = CASE WHEN path LIKE '/memories/%'
                        THEN pg_catalog.nextval('public.agent_changes_seq') ELSE c.memories END,
        skills = CASE WHEN path LIKE '/skills/%'
                      THEN pg_catalog.nextval('public.agent_changes_seq') ELSE c.skills END
    RETURNING CASE WHEN path LIKE '/skills/%' THEN c.skills ELSE c.memories END INTO value;
    RETURN value;
END
$$;
REVOKE ALL ON FUNCTION hango_change(text, text, text) FROM PUBLIC;

-- SECURITY DEFINER: the app role fires it but may only READ agent_changes and
-- agent_skill_deletions (it cannot forge or reset a counter). BEFORE: it stamps the row's
-- `changed`.
CREATE OR REPLACE FUNCTION hango_bump_changes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
    AS $$
DECLARE
    value bigint;
    gone boolean := false;  -- the old row's path leaves (a DELETE, or an UPDATE that moves it)
BEGIN
    IF TG_OP = 'DELETE' THEN
        gone := true;
    ELSIF TG_OP = 'UPDATE' THEN
        gone := (OLD.tenant_id, OLD.agent_id, OLD.path) IS DISTINCT FROM
                (NEW.tenant_id, NEW.agent_id, NEW.path);
    END IF;
    IF gone AND (OLD.path LIKE '/memories/%' OR OLD.path LIKE '/skills/%') THEN
        value := public.hango_change(OLD.tenant_id, OLD.agent_id, OLD.path);
        IF value IS NOT NULL AND OLD.path LIKE '/skills/%/SKILL.md' THEN
            INSERT INTO public.agent_skill_deletions (tenant_id, agent_id, path, changed)
                VALUES (OLD.tenant_id, OLD.agent_id, OLD.path, value)
            ON CONFLICT (tenant_id, agent_id, path) DO UPDATE SET changed = EXCLUDED.changed;
            IF EXISTS (SELECT 1 FROM public.agent_skill_deletions
                        WHERE tenant_id = OLD.tenant_id AND agent_id = OLD.agent_id OFFSET 256) THEN
                DELETE FROM public.agent_skill_deletions
                 WHERE tenant_id = OLD.tenant_id AND agent_id = OLD.agent_id;
                UPDATE public.agent_changes SET skills_since = value
                 WHERE tenant_id = OLD.tenant_id AND agent_id = OLD.agent_id;
            END IF;
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.changed := NULL;
    IF NEW.path LIKE '/memories/%' OR NEW.path LIKE '/skills/%' THEN
        value := public.hango_change(NEW.tenant_id, NEW.agent_id, NEW.path);
        IF NEW.path LIKE '/skills/%' THEN
            NEW.changed := value;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER agent_files_changes BEFORE INSERT OR UPDATE OR DELETE ON agent_files
    FOR EACH ROW EXECUTE FUNCTION hango_bump_changes();
-- TRUNCATE fires no row trigger: move every counter, and no delta starts before it.
CREATE OR REPLACE FUNCTION hango_bump_all_changes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
    AS $$
BEGIN
    UPDATE public.agent_changes SET memories = n.v, skills = n.v, skills_since = n.v
      FROM (SELECT pg_catalog.nextval('public.agent_changes_seq') AS v) n;
    DELETE FROM public.agent_skill_deletions;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER agent_files_truncated AFTER TRUNCATE ON agent_files
    FOR EACH STATEMENT EXECUTE FUNCTION hango_bump_all_changes();

-- The skills' heads, cut at write time. The skills scan reads only each SKILL.md's frontmatter.
-- Cutting it per row at every scan (substring + position over a TOASTed 2 KiB file) cost 10 ms
-- for 1,000 skills; a small column computed once, when the file is written (by any door: it is a
-- generated column), costs 1 ms to read. The cut is the one PostgresBackend.heads makes with the
-- skills middleware's arguments: the first 16384 bytes (frontmatter.HEAD_BYTES), ended after the
-- first line that is exactly `---` (skills.FENCES). NULL for every other file. A test checks both
-- give the same. The function's name carries its version: a new cut needs a new function and
-- column (and an upgrade step).
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
