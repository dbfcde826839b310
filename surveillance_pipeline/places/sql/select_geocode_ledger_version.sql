-- The geocoder ledger's version (migration 9), replaced by every statement that writes geocode_calls; and
-- whether this connection verifies every skip (make repair), which then trusts no version.
SELECT version::text, coalesce(current_setting(%(verify)s, true) = 'on', false)
FROM geocode_ledger_version
