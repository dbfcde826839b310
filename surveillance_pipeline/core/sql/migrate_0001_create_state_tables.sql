-- Migration 1: the state shared by every target, as first released. Idempotent (IF NOT EXISTS), so a
-- warehouse made before migrations were recorded takes it as a no-op.
-- State shared by every target: which snapshot each partition holds, and what each run did.
CREATE TABLE IF NOT EXISTS job_state (
    job           text        NOT NULL,
    partition_key text        NOT NULL,
    job_key       text        NOT NULL,
    parts         jsonb       NOT NULL,
    rows          bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, partition_key)
);

CREATE TABLE IF NOT EXISTS provenance (
    id            bigserial   PRIMARY KEY,
    run_id        text        NOT NULL,
    asset         text        NOT NULL,
    partition_key text        NOT NULL,
    action        text        NOT NULL CHECK (action IN ('loaded', 'skipped')),
    reason        text        NOT NULL,
    job_key       text        NOT NULL,
    parts         jsonb       NOT NULL,
    rows          bigint      NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS provenance_asset_partition ON provenance (asset, partition_key, id);

-- The DDL version each target table was built with; a different version rebuilds the table.
CREATE TABLE IF NOT EXISTS target_schema (
    target     text        PRIMARY KEY,
    version    integer     NOT NULL,
    built_at   timestamptz NOT NULL DEFAULT now()
);
