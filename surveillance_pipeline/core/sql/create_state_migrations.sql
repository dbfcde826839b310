-- Which migrations of the state tables (core/migrations.py) this warehouse has had, each once.
CREATE TABLE IF NOT EXISTS state_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
