SELECT job_key
FROM job_state
WHERE job = %(job)s AND partition_key = %(partition_key)s
FOR SHARE
