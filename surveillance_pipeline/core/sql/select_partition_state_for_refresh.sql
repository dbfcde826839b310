-- Under the partition's lock and the schema's shared lock, in one round trip: whether the target's table
-- is still current (a rebuild may have committed while the shared lock was awaited), the partition's state
-- row, locked for the refresh (NULLs when it has none), and its watch (select_partition_watch.sql).
SELECT ({schema_is_current}),
       state.job_key, state.parts, state.rows, state.digest,
       watch.edits, watch.triggers, watch.attached
FROM ({watch}) AS watch (edits, triggers, attached)
LEFT JOIN (
    SELECT job_key, parts, rows, digest
    FROM target_state
    WHERE target = %(target)s AND partition_key = %(partition_key)s
    FOR UPDATE
) AS state ON true
