-- Bearer tokens, and the functions through which the app role may use them.
--
-- Tokens are stored as SHA-256 digests. A token has an id (what `hango token list` shows; never
-- the secret), an optional expiry and the time of its last use. Revoking a token deletes its row:
-- it is 401 at once. Looked up before a tenant is known, so no row-level security here: the app
-- role may not read the table at all, only call the functions below.
CREATE TABLE IF NOT EXISTS api_tokens (
    token_sha256 bytea PRIMARY KEY,
    tenant_id    text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    role         text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    label        text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    token_id     text NOT NULL
        DEFAULT pg_catalog.left(pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''), 16),
    expires_at   timestamptz,
    last_used_at timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS api_tokens_token_id ON api_tokens (token_id);
CREATE INDEX IF NOT EXISTS api_tokens_tenant ON api_tokens (tenant_id);
REVOKE ALL ON api_tokens FROM hango_app;

-- The app role reads api_tokens only through these SECURITY DEFINER functions. Each runs as the
-- schema's owner, so each is pinned as PostgreSQL's "Writing SECURITY DEFINER Functions Safely"
-- says: search_path = pg_catalog, public, pg_temp (pg_temp LAST, else a session's temporary
-- table or view named api_tokens would be found first), and every table is schema-qualified.
-- hango_principal: the tenant and role of a live (unexpired) token, and its last use recorded at
-- most once a minute, so that authenticating is not a write per request.
CREATE OR REPLACE FUNCTION public.hango_principal(digest bytea)
    RETURNS TABLE (tenant_id text, role text)
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
    WITH touched AS (
        UPDATE public.api_tokens t SET last_used_at = pg_catalog.now()
         WHERE t.token_sha256 = digest
           AND (t.expires_at IS NULL OR t.expires_at > pg_catalog.now())
           AND (t.last_used_at IS NULL OR t.last_used_at < pg_catalog.now() - interval '1 minute')
        RETURNING 1
    )
    SELECT t.tenant_id, t.role FROM public.api_tokens t
     WHERE t.token_sha256 = digest
       AND (t.expires_at IS NULL OR t.expires_at > pg_catalog.now())
$$;

-- An owner manages the tokens of its own tenant over the API. The caller is named by its own
-- token's digest, never by a tenant id the session could set: without a live owner token these
-- functions see nothing and change nothing.
CREATE OR REPLACE FUNCTION public.hango_owner_tenant(caller bytea)
    RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT o.tenant_id FROM public.api_tokens o
     WHERE o.token_sha256 = caller AND o.role = 'owner'
       AND (o.expires_at IS NULL OR o.expires_at > pg_catalog.now())
$$;

CREATE OR REPLACE FUNCTION public.hango_token_list(caller bytea)
    RETURNS TABLE (token_id text, role text, label text, created_at timestamptz,
                   last_used_at timestamptz, expires_at timestamptz)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT t.token_id, t.role, t.label, t.created_at, t.last_used_at, t.expires_at
      FROM public.api_tokens t
     WHERE t.tenant_id = public.hango_owner_tenant(caller)
     ORDER BY t.created_at, t.token_id
     LIMIT 1000
$$;

-- The last live owner token of a tenant is not revoked (a check_violation, CONSTRAINT
-- hango_last_owner): nobody could manage the tenant over the API after it. Revokes of one tenant
-- queue on an advisory lock of its own, so two owners revoking each other cannot both win.
CREATE OR REPLACE FUNCTION public.hango_token_revoke(caller bytea, id text)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    owned text := public.hango_owner_tenant(caller);
BEGIN
    IF owned IS NULL THEN
        RETURN NULL;  -- the caller is not a live owner (revoked or expired since it was checked)
    END IF;
    -- one revoke per tenant at a time (a lock of its own: the tenant's row is behind RLS, and
    -- this function's owner sees no tenant), so two owners revoking each other leave one
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtextextended('hango token revoke/' || owned, 0));
    IF EXISTS (SELECT 1 FROM public.api_tokens t
                WHERE t.tenant_id = owned AND t.token_id = id AND t.role = 'owner'
                  AND (t.expires_at IS NULL OR t.expires_at > pg_catalog.now()))
       AND NOT EXISTS (SELECT 1 FROM public.api_tokens o
                        WHERE o.tenant_id = owned AND o.token_id <> id AND o.role = 'owner'
                          AND (o.expires_at IS NULL OR o.expires_at > pg_catalog.now())) THEN
        RAISE EXCEPTION 'token % is the last owner token of this tenant: without it nobody could manage the tenant over the API; create another owner token first, then revoke this one (an administrator can still revoke it: hango token revoke)', id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'hango_last_owner';
    END IF;
    DELETE FROM public.api_tokens t WHERE t.tenant_id = owned AND t.token_id = id;
    RETURN FOUND;
END
$$;

-- Returns the new token's row, or nothing when the caller is not a live owner. At most 1,000
-- tokens a tenant (the listing's bound): creates of one tenant queue on an advisory lock, so that
-- concurrent creates cannot overshoot.
CREATE OR REPLACE FUNCTION public.hango_token_create(
        caller bytea, digest bytea, id text, new_role text, new_label text, expires timestamptz)
    RETURNS TABLE (token_id text, role text, label text, created_at timestamptz,
                   last_used_at timestamptz, expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    owned text := public.hango_owner_tenant(caller);
BEGIN
    IF owned IS NULL THEN
        RETURN;
    END IF;
    -- one create per tenant at a time (a lock of its own: the tenant's row is behind RLS)
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtextextended('hango_token_create/' || owned, 0));
    IF (SELECT pg_catalog.count(*) FROM public.api_tokens t WHERE t.tenant_id = owned) >= 1000 THEN
        RAISE EXCEPTION 'tenant % already has 1000 tokens (the cap); revoke some first', owned
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN QUERY
    INSERT INTO public.api_tokens AS t
           (token_sha256, tenant_id, role, label, token_id, expires_at)
    VALUES (digest, owned, new_role, new_label, id, expires)
    RETURNING t.token_id, t.role, t.label, t.created_at, t.last_used_at, t.expires_at;
END
$$;

-- hango_read_file: the files API's plain GET in one statement, as the app role (NOT a SECURITY
-- DEFINER: row-level security applies to the read). It takes the role hango_app for this
-- transaction itself (the caller may be the URL's role: one statement, no SET before it). Who
-- the token is comes from hango_principal (an unknown, revoked or expired token is nobody: no
-- row); that tenant is set for this transaction only, and the first `cap` bytes of one file are
-- read as it. A row with a NULL content: the token is live, the file is not there.
CREATE OR REPLACE FUNCTION public.hango_read_file(digest bytea, agent text, file_path text,
                                                  cap integer)
    RETURNS TABLE (tenant_id text, role text, content bytea, version bigint, size integer)
    LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM pg_catalog.set_config('role', 'hango_app', true);
    SELECT p.tenant_id, p.role INTO tenant_id, role FROM public.hango_principal(digest) p;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_catalog.set_config('hango.tenant_id', hango_read_file.tenant_id, true);
    SELECT substring(f.content FROM 1 FOR cap), f.version, f.size INTO content, version, size
      FROM public.agent_files f
     WHERE f.tenant_id = hango_read_file.tenant_id AND f.agent_id = agent
       AND f.path = file_path;
    RETURN NEXT;
END
$$;

-- Functions are executable by PUBLIC unless revoked: only hango_app (and the owner) call these.
REVOKE ALL ON FUNCTION public.hango_principal(bytea), public.hango_owner_tenant(bytea),
    public.hango_token_list(bytea), public.hango_token_revoke(bytea, text),
    public.hango_token_create(bytea, bytea, text, text, text, timestamptz),
    public.hango_read_file(bytea, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION public.hango_principal(bytea), public.hango_owner_tenant(bytea),
    public.hango_token_list(bytea), public.hango_token_revoke(bytea, text),
    public.hango_token_create(bytea, bytea, text, text, text, timestamptz),
    public.hango_read_file(bytea, text, text, integer) TO hango_app;

-- No temporary objects and no new objects in public for the app role (nor for PUBLIC, where the
-- role applying this schema owns the database: elsewhere REVOKE only warns, and the pinned
-- search_path above still holds). A session of hango_app can then shadow nothing.
DO $$
BEGIN
    EXECUTE pg_catalog.format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC, hango_app',
                              pg_catalog.current_database());
    REVOKE CREATE ON SCHEMA public FROM PUBLIC, hango_app;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'hango: could not revoke TEMPORARY/CREATE from PUBLIC (%): the role applying '
                  'the schema does not own the database', SQLERRM;
END
$$;

