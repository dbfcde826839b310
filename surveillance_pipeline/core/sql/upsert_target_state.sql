INSERT INTO target_state (target, partition_key, job_key, parts, rows, updated_at, partition_ref, digest)
VALUES (%(target)s, %(partition_key)s, %(job_key)s, %(parts)s, %(rows)s, now(), %(partition_ref)s, %(digest)s)
ON CONFLICT (target, partition_key) DO UPDATE
SET job_key = EXCLUDED.job_key,
    parts = EXCLUDED.parts,
    rows = EXCLUDED.rows,
    updated_at = EXCLUDED.updated_at,
    partition_ref = EXCLUDED.partition_ref,
    digest = EXCLUDED.digest
