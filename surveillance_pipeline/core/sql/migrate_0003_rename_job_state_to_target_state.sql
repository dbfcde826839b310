-- Migration 3: the state table is named for what it describes, a target's partition, not a Dagster job:
-- job_state(job, ...) becomes target_state(target, ...). A view keeps the old name and column, so a query
-- written against job_state (a dashboard, a script) still reads; the view is simple, so it still writes too.
DO $$
BEGIN
    IF to_regclass('target_state') IS NULL THEN
        ALTER TABLE job_state RENAME TO target_state;
        ALTER TABLE target_state RENAME COLUMN job TO target;
        ALTER INDEX IF EXISTS job_state_pkey RENAME TO target_state_pkey;
    END IF;
END
$$;
CREATE OR REPLACE VIEW job_state AS
SELECT target AS job, partition_key, job_key, parts, rows, updated_at
FROM target_state;
COMMENT ON VIEW job_state IS 'target_state under its name before migration 3, kept so old queries read';
