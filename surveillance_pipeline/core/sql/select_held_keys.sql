-- Whether the connection verifies every skip, and the key each partition of the named targets holds, read
-- without a lock, leaving out the partitions with an edit noted against them since their load (refresh.py's
-- HeldKeys: a guess of a downstream job key, checked again when a skip is recorded; a load reads its inputs'
-- keys under a share lock). One row with no partition when none is held.
SELECT verifying.every_skip, state.target, state.partition_key, state.job_key
FROM (SELECT coalesce(current_setting(%(verify)s, true) = 'on', false)) AS verifying (every_skip)
LEFT JOIN target_state AS state
    ON state.target = ANY(%(targets)s)
    AND NOT EXISTS (
        SELECT 1 FROM target_edits AS edits
        WHERE edits.target = state.target AND edits.partition_ref = state.partition_ref)
