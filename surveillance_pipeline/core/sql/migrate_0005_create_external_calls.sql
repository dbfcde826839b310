-- Migration 5: the idempotency-key ledger of side-effecting calls (ledger/external_calls.py), as first
-- released; idempotent for warehouses that created it before it was a migration.
-- One row per side-effecting call, keyed by its idempotency key: 'pending' is committed before the call,
-- 'done' (with the answer) after it, each in its own transaction.
CREATE TABLE IF NOT EXISTS external_calls (
    idempotency_key     text        PRIMARY KEY,
    service             text        NOT NULL,
    status              text        NOT NULL CHECK (status IN ('pending', 'done')),
    request_fingerprint text        NOT NULL,
    response            jsonb,
    adopted             boolean     NOT NULL DEFAULT false,  -- found by reconciling, not by our call
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
)
