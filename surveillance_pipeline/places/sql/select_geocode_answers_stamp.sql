-- What the answered ledger entries for some keys hold, as one count and one md5 over their text in key
-- order: equal stamps, equal entries (an edit, a new answer or a deleted row changes it). Read by a skip,
-- which then need not bring every entry to Python; a load still reads and share-locks the entries.
SELECT count(*),
       md5(coalesce(string_agg(
           concat_ws('|', idempotency_key, status, coalesce(longitude::text, '-'),
                     coalesce(latitude::text, '-')),
           E'\n' ORDER BY idempotency_key COLLATE "C"), ''))
FROM geocode_calls
WHERE service = %(service)s
  AND idempotency_key = ANY(string_to_array(%(keys)s, ','))
  AND status <> 'pending'
