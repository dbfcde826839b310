-- The answered ledger entries for some keys, in key order, share-locked for the reading transaction.
SELECT idempotency_key, status, longitude, latitude
FROM geocode_calls
WHERE service = %(service)s
  AND idempotency_key = ANY(string_to_array(%(keys)s, ','))
  AND status <> 'pending'
ORDER BY idempotency_key COLLATE "C"
FOR SHARE
