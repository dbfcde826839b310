SELECT job_key, parts, rows, digest
FROM target_state
WHERE target = %(target)s AND partition_key = %(partition_key)s
FOR UPDATE
