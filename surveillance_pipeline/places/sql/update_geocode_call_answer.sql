-- Committed as soon as the answer is in: a paid answer is never asked for again.
UPDATE geocode_calls
SET status = %(status)s,
    longitude = %(longitude)s,
    latitude = %(latitude)s,
    answered_at = now()
WHERE service = %(service)s AND idempotency_key = %(key)s
