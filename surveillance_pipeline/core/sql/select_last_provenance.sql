SELECT job_key, parts, action
FROM provenance
WHERE asset = %s AND partition_key = %s
ORDER BY id DESC
LIMIT 1
