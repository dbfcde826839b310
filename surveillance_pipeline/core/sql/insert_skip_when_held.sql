-- A skip decided and recorded in one round trip (refresh.py's refresh_partition, when the caller's likely
-- key is the one held): one provenance row "skipped", written only when every condition the refresh
-- transaction checks before a skip holds at once, in this statement's one snapshot:
-- the target's table is current (select_target_schema_is_current.sql);
-- the partition's state row holds the key, with a fingerprint;
-- no edit is noted against the partition, and its watch is whole (select_partition_watch.sql);
-- and the connection does not ask that every skip be verified.
-- No row comes back otherwise, and the caller takes the refresh transaction's path.
-- No lock is taken: a skip writes no target row, and what it reports is what this snapshot saw. A load
-- in flight for the partition has not committed, so the key read is the one held until it does.
-- The commit does not wait for its WAL flush (commit_without_waiting_for_disk): a lost skip row costs
-- nothing.
INSERT INTO provenance (run_id, asset, partition_key, action, reason, job_key, parts, rows, detail, worker)
SELECT %(run_id)s, state.target, state.partition_key, %(action)s, %(reason)s, state.job_key, %(parts)s,
       state.rows, NULL, %(worker)s
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS commit_wait,
     target_state AS state,
     ({watch}) AS watch (edits, triggers, attached)
WHERE state.target = %(target)s
  AND state.partition_key = %(partition_key)s
  AND state.job_key = %(job_key)s
  AND state.digest IS NOT NULL AND state.digest <> %(unknown_digest)s
  AND ({schema_is_current})
  AND NOT coalesce(current_setting(%(verify)s, true) = 'on', false)
  AND watch.edits IS NULL
  AND watch.triggers = %(whole_watch_triggers)s
  AND watch.attached
RETURNING rows
