-- Migration 10: a TRUNCATE of one species' own table of occurrences notes that species alone.
-- note_target_edit (migration 8) noted every loaded partition of the target for any TRUNCATE, since a
-- statement-level TRUNCATE trigger sees no rows: `TRUNCATE occurrences_2` in psql then reloaded all 71
-- species instead of one. The function is replaced whole; every table's triggers call it by name, so
-- partitions loaded before this migration are watched by the new body at once.
CREATE OR REPLACE FUNCTION note_target_edit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $function$
DECLARE
    edited_target text := TG_ARGV[0];
    partition_column text := TG_ARGV[1];
    ref_expression text;
    own_ref text;
BEGIN
    IF current_setting('surveillance.refreshing', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        -- A table of one partition (<target>_<partition_ref>, as Target.partition_table names it) holds
        -- only that partition's rows: its TRUNCATE notes that partition alone. The target's own table, or
        -- a table named otherwise (renamed by hand), notes every loaded partition.
        IF TG_TABLE_NAME <> edited_target
           AND left(TG_TABLE_NAME, length(edited_target) + 1) = edited_target || '_' THEN
            own_ref := substr(TG_TABLE_NAME, length(edited_target) + 2);
            IF NOT EXISTS (
                SELECT FROM target_state WHERE target = edited_target AND partition_ref = own_ref
            ) THEN
                own_ref := NULL;
            END IF;
        END IF;
        INSERT INTO target_edits AS edits (target, partition_ref, operations)
        SELECT edited_target, ref, ARRAY[TG_OP]
        FROM (
            SELECT partition_ref AS ref FROM target_state
            WHERE target = edited_target AND partition_ref IS NOT NULL
              AND (own_ref IS NULL OR partition_ref = own_ref)
            UNION SELECT 'all' WHERE partition_column = ''
        ) AS loaded
        ON CONFLICT (target, partition_ref) DO UPDATE
        SET operations = CASE WHEN TG_OP = ANY (edits.operations) THEN edits.operations
                              ELSE edits.operations || TG_OP END,
            last_seen = now();
        RETURN NULL;
    END IF;
    ref_expression := CASE WHEN partition_column = '' THEN quote_literal('all')
                           ELSE quote_ident(partition_column) || '::text' END;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        EXECUTE format(
            'INSERT INTO target_edits AS edits (target, partition_ref, operations) '
            'SELECT DISTINCT $1, %s, ARRAY[$2] FROM new_rows '
            'ON CONFLICT (target, partition_ref) DO UPDATE SET operations = CASE WHEN $2 = ANY '
            '(edits.operations) THEN edits.operations ELSE edits.operations || $2 END, last_seen = now()',
            ref_expression)
        USING edited_target, TG_OP;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        EXECUTE format(
            'INSERT INTO target_edits AS edits (target, partition_ref, operations) '
            'SELECT DISTINCT $1, %s, ARRAY[$2] FROM old_rows '
            'ON CONFLICT (target, partition_ref) DO UPDATE SET operations = CASE WHEN $2 = ANY '
            '(edits.operations) THEN edits.operations ELSE edits.operations || $2 END, last_seen = now()',
            ref_expression)
        USING edited_target, TG_OP;
    END IF;
    RETURN NULL;
END
$function$;
-- A definer's function names its tables in its own schema, never the caller's search_path.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION note_target_edit() SET search_path = %I, pg_temp', current_schema());
END
$$;
