-- Dagster's own record (dagster-postgres event_logs): materializations of one asset per partition in
-- the given runs.
SELECT partition, count(*)
FROM event_logs
WHERE asset_key = %(asset_key)s
  AND dagster_event_type = 'ASSET_MATERIALIZATION'
  AND run_id = ANY(%(run_ids)s)
GROUP BY partition
ORDER BY partition
