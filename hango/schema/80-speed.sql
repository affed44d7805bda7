-- The speed layer's objects: what lets before_run skip work when nothing changed, and read the
-- skills' frontmatter without cutting it at every scan. Deleting them costs speed, never a result.

-- The change counter. One row per agent whose memory or skills files were ever written:
-- `counter` takes a fresh value of a global sequence in the SAME transaction as every INSERT,
-- UPDATE (path moves included) or DELETE of a row under /memories/ or /skills/, whoever writes it
-- (files API, agent tools, the backend, another process, plain SQL): a trigger, not application
-- code. before_run reads it first and reuses its parsed memory and skills index while it has not
-- moved. A sequence, not +1: an agent deleted and created again never gets back a counter value a
-- cache may still hold.
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
REVOKE ALL ON agent_changes FROM hango_app;
GRANT SELECT ON agent_changes TO hango_app;

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
CREATE OR REPLACE TRIGGER agent_files_changes AFTER INSERT OR UPDATE OR DELETE ON agent_files
    FOR EACH ROW EXECUTE FUNCTION hango_bump_changes();
-- TRUNCATE fires no row trigger: move every counter.
CREATE OR REPLACE FUNCTION hango_bump_all_changes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
    AS $$ BEGIN UPDATE public.agent_changes SET counter = pg_catalog.nextval('public.agent_changes_seq'); RETURN NULL; END $$;
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
