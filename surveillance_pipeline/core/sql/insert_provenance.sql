-- One provenance row. %(unflushed)s: a skip's row alone, outside any transaction, commits without waiting
-- for its WAL flush: the setting is local to the statement's own implicit transaction, and its commit
-- reads it (one round trip instead of BEGIN, SET, INSERT and COMMIT). Otherwise the setting is left as is.
INSERT INTO provenance (run_id, asset, partition_key, action, reason, job_key, parts, rows, detail, worker)
SELECT %(run_id)s, %(asset)s, %(partition_key)s, %(action)s, %(reason)s, %(job_key)s, %(parts)s, %(rows)s,
       %(detail)s, %(worker)s
FROM (SELECT set_config('synchronous_commit',
                        CASE WHEN %(unflushed)s THEN 'off' ELSE current_setting('synchronous_commit') END,
                        true)) AS commit_wait
RETURNING id
