-- Migration 4: the batch ledger (ledger/batches.py), as first released; idempotent for warehouses that
-- created it before it was a migration.
CREATE TABLE IF NOT EXISTS batch_ledger (
    checksum      text        PRIMARY KEY,   -- sha256 of the batch file's bytes
    target        text        NOT NULL,
    partition_key text        NOT NULL,
    rows          bigint      NOT NULL,
    status        text        NOT NULL CHECK (status IN ('applied')),
    applied_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS batch_ledger_target_partition ON batch_ledger (target, partition_key, applied_at);
