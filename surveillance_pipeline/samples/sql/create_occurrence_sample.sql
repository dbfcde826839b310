-- occurrence_sample, schema version 1, and the membership drift each refresh records (the run's job key
-- is in its provenance row).
CREATE TABLE {table} (
    species_id integer NOT NULL,
    id         bigint  NOT NULL,
    pick       integer NOT NULL CHECK (pick >= 1),
    PRIMARY KEY (species_id, id),
    UNIQUE (species_id, pick)
);

CREATE TABLE IF NOT EXISTS sample_drift (
    run_id      text        NOT NULL,
    species_id  integer     NOT NULL,
    id          bigint      NOT NULL,
    change      text        NOT NULL CHECK (change IN ('entered', 'left')),
    pick        integer     NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sample_drift_species ON sample_drift (species_id, recorded_at);
