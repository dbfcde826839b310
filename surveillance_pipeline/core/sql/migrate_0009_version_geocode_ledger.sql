-- Migration 9: the geocoder ledger's version. A token that every statement writing geocode_calls
-- replaces, in the writer's own transaction (a statement-level trigger: INSERT, UPDATE, DELETE, TRUNCATE,
-- COPY, from any client). A token read again means no write to the ledger has committed since: a skip of
-- geocoded_localities whose memo names the token need not read the species' entries, or even their stamp
-- (which sent each species' thousands of keys to the server).
-- A random token rather than a counter: a restored backup counts again from an older value, and a counter
-- could then name other entries than it named before; a token no other write can have names only its own.
-- Blind spot, as for the watch of migration 8: a write with triggers off (session_replication_role =
-- replica, a data-only restore with --disable-triggers) keeps the token. make repair trusts no token.
CREATE TABLE IF NOT EXISTS geocode_ledger_version (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version  uuid    NOT NULL DEFAULT gen_random_uuid()
);
INSERT INTO geocode_ledger_version DEFAULT VALUES ON CONFLICT (only_row) DO NOTHING;

-- SECURITY DEFINER: a client allowed to write the ledger renews the version even when it may not write
-- the version's table itself.
CREATE OR REPLACE FUNCTION renew_geocode_ledger_version() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $function$
BEGIN
    UPDATE geocode_ledger_version SET version = gen_random_uuid();
    RETURN NULL;
END
$function$;
-- A definer's function names its tables in its own schema, never the caller's search_path (where a
-- temporary table of the same name would come first).
DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION renew_geocode_ledger_version() SET search_path = %I, pg_temp', current_schema()
    );
END
$$;

DROP TRIGGER IF EXISTS geocode_calls_renew_version ON geocode_calls;
CREATE TRIGGER geocode_calls_renew_version
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON geocode_calls
FOR EACH STATEMENT EXECUTE FUNCTION renew_geocode_ledger_version();
