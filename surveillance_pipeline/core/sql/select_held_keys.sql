-- The key each partition of the named targets holds, read without a lock, leaving out the partitions with an
-- edit noted against them since their load (refresh.py's HeldKeys: a guess of a downstream job key, checked
-- again when a skip is recorded; a load reads its inputs' keys under a share lock).
SELECT state.target, state.partition_key, state.job_key
FROM target_state AS state
WHERE state.target = ANY(%(targets)s)
  AND NOT EXISTS (
      SELECT 1 FROM target_edits AS edits
      WHERE edits.target = state.target AND edits.partition_ref = state.partition_ref)
