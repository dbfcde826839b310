-- Every quality partition's fingerprint and config (each test's version and parameters), by slug.
SELECT partition_key, rows, digest, parts -> 'config'
FROM target_state
WHERE target = %(target)s
ORDER BY partition_key
