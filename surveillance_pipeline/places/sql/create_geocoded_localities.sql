-- geocoded_localities, schema version 1. {table} is the table identifier, bound by the driver.
-- Records that had a locality text but no coordinates, with the ledger's answer; never the text.
CREATE TABLE {table} (
    id          bigint           PRIMARY KEY,  -- GBIF's gbifID
    species_id  integer          NOT NULL,
    status      text             NOT NULL CHECK (status IN ('found', 'not_found')),
    longitude   double precision,
    latitude    double precision,
    geom        geometry(Point, 4326),
    CHECK ((status = 'found') = (geom IS NOT NULL))
);
CREATE INDEX ON {table} (species_id);
