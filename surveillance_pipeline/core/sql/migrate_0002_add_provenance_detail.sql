-- Migration 2: provenance v2: what a stage needs to be replayed (its derived seed, its manifest's sha256), as JSON.
-- Added in place and nullable: rows written before it stay valid, and the statement is idempotent.
ALTER TABLE provenance ADD COLUMN IF NOT EXISTS detail jsonb;
