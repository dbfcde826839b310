-- Which of these keys the ledger already holds an answer for (a pending row has none).
SELECT idempotency_key
FROM geocode_calls
WHERE service = %(service)s
  AND idempotency_key = ANY(%(keys)s)
  AND status <> 'pending'
