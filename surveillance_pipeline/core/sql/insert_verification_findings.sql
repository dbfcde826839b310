-- Note the partitions a verification found not holding their snapshot where no trigger saw an edit (the
-- watch was bypassed: triggers off, a replica, a restore): from here on they are edits like any other, so
-- the next refresh reloads each with that reason, the plan names it, and the checks' sensor reports it.
INSERT INTO target_edits AS edits (target, partition_ref, operations)
SELECT %(target)s, ref, ARRAY[%(operation)s::text]
FROM unnest(%(refs)s::text[]) AS ref
ON CONFLICT (target, partition_ref) DO UPDATE
SET operations = CASE WHEN %(operation)s = ANY (edits.operations) THEN edits.operations
                      ELSE edits.operations || %(operation)s::text END,
    last_seen = now()
