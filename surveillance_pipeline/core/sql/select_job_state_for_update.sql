SELECT job_key, parts, rows
FROM job_state
WHERE job = %(job)s AND partition_key = %(partition_key)s
FOR UPDATE
