-- Migration 8: a target is checked, not trusted.
-- * target_state records, with the key, what the load wrote: the rows' count (rows, as before) and an
--   order-independent digest of their content, for the partition's rows named by partition_ref (the
--   species_id, or 'all' for a target kept whole).
-- * target_edits lists the partitions that a statement outside a refresh transaction touched (INSERT,
--   UPDATE, DELETE, TRUNCATE, COPY, from any client), as statement-level triggers on every target table
--   note them. A refresh transaction sets surveillance.refreshing and is not noted.
-- * target_schema.table_oid is the table the triggers were put on: another oid means the table was
--   dropped and made again (by a restore, by hand), with no trigger on it.
ALTER TABLE target_state ADD COLUMN IF NOT EXISTS partition_ref text;
ALTER TABLE target_state ADD COLUMN IF NOT EXISTS digest text;
ALTER TABLE target_schema ADD COLUMN IF NOT EXISTS table_oid oid;

-- Rows loaded before fingerprints existed: their partition is the species of the slug (or the whole
-- target); their digest stays NULL until the next run records the digest of what they hold.
UPDATE target_state SET partition_ref = 'all' WHERE partition_key = 'all' AND partition_ref IS NULL;
DO $$
BEGIN
    IF to_regclass('species') IS NOT NULL THEN
        UPDATE target_state AS state SET partition_ref = species.species_id::text
        FROM species WHERE state.partition_key = species.slug AND state.partition_ref IS NULL;
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS target_edits (
    target        text        NOT NULL,
    partition_ref text        NOT NULL,
    operations    text[]      NOT NULL,
    first_seen    timestamptz NOT NULL DEFAULT now(),
    last_seen     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target, partition_ref)
);

-- The trigger function every watched table shares: TG_ARGV[0] is the target, TG_ARGV[1] the column that
-- names a row's partition ('' when the target is kept whole). SECURITY DEFINER: a client allowed to edit
-- a target table is noted even when it may not write target_edits itself.
CREATE OR REPLACE FUNCTION note_target_edit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $function$
DECLARE
    edited_target text := TG_ARGV[0];
    partition_column text := TG_ARGV[1];
    ref_expression text;
BEGIN
    IF current_setting('surveillance.refreshing', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        INSERT INTO target_edits AS edits (target, partition_ref, operations)
        SELECT edited_target, ref, ARRAY[TG_OP]
        FROM (
            SELECT partition_ref AS ref FROM target_state
            WHERE target = edited_target AND partition_ref IS NOT NULL
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
