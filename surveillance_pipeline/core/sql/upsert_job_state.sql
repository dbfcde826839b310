INSERT INTO job_state (job, partition_key, job_key, parts, rows, updated_at)
VALUES (%(job)s, %(partition_key)s, %(job_key)s, %(parts)s, %(rows)s, now())
ON CONFLICT (job, partition_key) DO UPDATE
SET job_key = EXCLUDED.job_key,
    parts = EXCLUDED.parts,
    rows = EXCLUDED.rows,
    updated_at = EXCLUDED.updated_at
