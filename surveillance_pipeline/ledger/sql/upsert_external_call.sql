INSERT INTO external_calls (idempotency_key, service, status, request_fingerprint, response, adopted)
VALUES (%(key)s, %(service)s, %(status)s, %(fingerprint)s, %(response)s, %(adopted)s)
ON CONFLICT (idempotency_key) DO UPDATE
SET status = EXCLUDED.status,
    response = EXCLUDED.response,
    adopted = EXCLUDED.adopted,
    updated_at = now()
