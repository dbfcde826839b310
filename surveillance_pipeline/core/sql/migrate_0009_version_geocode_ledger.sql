-- Migration 9: the geocoder ledger's version (#27). A token that every statement writing geocode_calls
-- replaces, in the writer's own transaction (a statement-level trigger: INSERT, UPDATE, DELETE, TRUNCATE,
-- COPY, from any client). A token read again means no write to the ledger has committed since: a skip of
-- geocoded_localities whose memo names the token need not read the species' entries, or even their stamp
-- (which sent each species' thousands of keys to the server).
-- A random token rather than a counter: a restored backup counts again from an older value, and a counter
-- could then name other entries than it named before; a token no other write can have names only its own.
CREATE TABLE IF NOT EXISTS geocode_ledger_version (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version  uuid    NOT NULL DEFAULT gen_random_uuid()
);
INSERT INTO geocode_ledger_version DEFAULT VALUES ON CONFLICT (only_row) DO NOTHING;

-- SECURITY DEFINER: a client allowed to write the ledger renews the version even when it may not write
-- the version's table itself.
CREATE OR REPLACE FUNCTION renew_geocode_ledger_version() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $function$
BEGIN
    UPDATE geocode_ledger_version SET version = gen_random_uuid();
    RETURN NULL;
END
$function$;

DROP TRIGGER IF EXISTS geocode_calls_renew_version ON geocode_calls;
CREATE TRIGGER geocode_calls_renew_version
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON geocode_calls
FOR EACH STATEMENT EXECUTE FUNCTION renew_geocode_ledger_version();
