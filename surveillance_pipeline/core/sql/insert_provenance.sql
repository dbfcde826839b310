INSERT INTO provenance (run_id, asset, partition_key, action, reason, job_key, parts, rows, detail, worker)
VALUES (%(run_id)s, %(asset)s, %(partition_key)s, %(action)s, %(reason)s, %(job_key)s, %(parts)s, %(rows)s,
        %(detail)s, %(worker)s)
RETURNING id
