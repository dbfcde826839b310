-- Every edit noted and not yet repaired (a reload forgets it), by target, with the partition's key as its
-- state row names it, in a fixed order: what the checks' sensor reports.
SELECT edits.target,
       coalesce(state.partition_key, edits.partition_ref),
       array_to_string(edits.operations, ', ')
FROM target_edits AS edits
LEFT JOIN target_state AS state
       ON state.target = edits.target AND state.partition_ref = edits.partition_ref
ORDER BY edits.target, 2
