-- Migration 6: the geocoder call ledger (places/ledger.py), as first released; idempotent for warehouses
-- that created it before it was a migration.
-- The geocoder's call ledger: one row per (service, HMAC of a normalized locality), never the text itself.
-- 'pending' is committed before a request and the answer after it, each in its own transaction, so a run
-- that dies keeps every answer it had received. A pending row is an answer that never arrived.
CREATE TABLE IF NOT EXISTS geocode_calls (
    service         text             NOT NULL,
    idempotency_key text             NOT NULL,  -- hex HMAC-SHA256(salt, normalized locality)
    status          text             NOT NULL CHECK (status IN ('pending', 'found', 'not_found')),
    longitude       double precision,
    latitude        double precision,
    attempts        integer          NOT NULL DEFAULT 1,
    requested_at    timestamptz      NOT NULL DEFAULT now(),
    answered_at     timestamptz,
    PRIMARY KEY (service, idempotency_key),
    CHECK ((status = 'found') = (longitude IS NOT NULL AND latitude IS NOT NULL))
)
