-- occurrence_feed, schema version 1: the daily batches, upserted by gbifID.
CREATE TABLE {table} (
    id           bigint           PRIMARY KEY,  -- GBIF's gbifID
    species_slug text             NOT NULL,
    year         integer,
    longitude    double precision,
    latitude     double precision,
    license      text,
    geom         geometry(Point, 4326),
    batch_date   date             NOT NULL
);
CREATE INDEX ON {table} USING gist (geom);
