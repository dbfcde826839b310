SELECT parts
FROM provenance
WHERE asset = %s AND partition_key = %s AND action = 'loaded'
ORDER BY id DESC
LIMIT 1
