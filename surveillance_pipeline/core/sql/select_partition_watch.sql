-- Whether a partition may be trusted without reading its rows: the edits noted against it, and how many
-- of the watch's triggers are in place and enabled on the tables that hold it (4 per table), and, for a
-- partition kept as a table of its own, whether that table is still attached to the target's table.
SELECT
    (SELECT array_to_string(operations, ', ') FROM target_edits
     WHERE target = %(target)s AND partition_ref = %(partition_ref)s),
    (SELECT count(*) FROM pg_trigger
     WHERE tgrelid IN (SELECT to_regclass(name) FROM unnest(%(tables)s::text[]) AS name)
       AND tgname LIKE 'surveillance\_watch\_%%' AND tgenabled <> 'D'),
    %(own_table)s::text IS NULL OR EXISTS (
        SELECT 1 FROM pg_inherits
        WHERE inhrelid = to_regclass(%(own_table)s::text) AND inhparent = to_regclass(%(target)s))
