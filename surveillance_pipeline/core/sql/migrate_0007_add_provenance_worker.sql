-- Migration 7: provenance names the process that wrote each row, as host:pid: with Celery workers, which
-- worker loaded a partition. Nullable: rows written before it stay valid.
ALTER TABLE provenance ADD COLUMN IF NOT EXISTS worker text;
