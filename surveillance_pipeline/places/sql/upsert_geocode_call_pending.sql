-- Committed before the request: the attempt is on record even if the process dies during it.
INSERT INTO geocode_calls (service, idempotency_key, status)
VALUES (%(service)s, %(key)s, 'pending')
ON CONFLICT (service, idempotency_key) DO UPDATE
SET attempts = geocode_calls.attempts + 1,
    requested_at = now()
WHERE geocode_calls.status = 'pending'
