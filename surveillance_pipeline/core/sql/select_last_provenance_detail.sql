SELECT job_key, detail, rows
FROM provenance
WHERE asset = %s AND partition_key = %s
ORDER BY id DESC
LIMIT 1
