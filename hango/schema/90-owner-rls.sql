-- Row-level security for the tables' owner too. Keep this file LAST: it applies to every table
-- that has row-level security, whichever file made it.
--
-- The tables' owner (the URL's role on a managed server) is held by the same policies as the app
-- role: FORCE on every table that has row-level security, so a transaction of the owner sees
-- only the tenant it set. What the owner does across tenants (provisioning many, the upgrade
-- steps, a sweep) it says so: hango.all_tenants = 'on' for the transaction, honoured only for the
-- owner (Database.admin(all_tenants=True)); hango_app setting it gains nothing. A superuser (the
-- embedded server's admin) bypasses row-level security whatever is set.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT c.relname, pg_catalog.pg_get_userbyid(c.relowner) AS owner
               FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
                AND c.relrowsecurity
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', t.relname);
        EXECUTE pg_catalog.format('DROP POLICY IF EXISTS hango_all_tenants ON public.%I',
                                  t.relname);
        EXECUTE pg_catalog.format(
            'CREATE POLICY hango_all_tenants ON public.%I TO %I'
            ' USING (pg_catalog.current_setting(''hango.all_tenants'', true) = ''on'')',
            t.relname, t.owner);
    END LOOP;
END
$$;
