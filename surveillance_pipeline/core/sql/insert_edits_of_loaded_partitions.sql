-- Note every loaded partition of a target as edited by %(operation)s (its table was dropped or made again
-- outside the pipeline): each reloads on its next refresh, with that reason.
INSERT INTO target_edits AS edits (target, partition_ref, operations)
SELECT target, partition_ref, ARRAY[%(operation)s]
FROM target_state
WHERE target = %(target)s AND partition_ref IS NOT NULL
ON CONFLICT (target, partition_ref) DO UPDATE
SET operations = CASE WHEN %(operation)s = ANY (edits.operations) THEN edits.operations
                      ELSE edits.operations || %(operation)s END,
    last_seen = now()
