-- geocoded_localities, schema version 2. {table} is the table identifier, bound by the driver.
-- Records that had a locality text but no coordinates, with the ledger's answer; never the text.
-- Keyed by species and id, as occurrences is: one gbifID can be two species' record (a record GBIF
-- re-identified between two downloads, while the other species still holds it; a record two registry
-- species match). Keyed by id alone (version 1), such a species' load failed on the other's row, and two
-- species that swapped records failed each other on every run.
CREATE TABLE {table} (
    id          bigint           NOT NULL,  -- GBIF's gbifID
    species_id  integer          NOT NULL,
    status      text             NOT NULL CHECK (status IN ('found', 'not_found')),
    longitude   double precision,
    latitude    double precision,
    geom        geometry(Point, 4326),
    CHECK ((status = 'found') = (geom IS NOT NULL)),
    PRIMARY KEY (species_id, id)
);
