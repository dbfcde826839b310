-- occurrences, schema version 2. {table} is the table identifier, bound by the driver.
-- One partition per species (LIST on species_id): a reload builds the species' rows in a fresh table,
-- indexes them once (a bulk build, not a million index inserts), and swaps the table in.
CREATE TABLE IF NOT EXISTS species (
    species_id      integer PRIMARY KEY,
    slug            text    NOT NULL UNIQUE,
    scientific_name text    NOT NULL,
    vernacular_name text,
    taxon_key       bigint
);

CREATE TABLE {table} (
    id          bigint           NOT NULL,  -- GBIF's gbifID
    species_id  integer          NOT NULL,
    year        integer,
    longitude   double precision,
    latitude    double precision,
    license     text,
    geom        geometry(Point, 4326),
    CONSTRAINT geom_matches_coordinates CHECK ((geom IS NULL) = (longitude IS NULL AND latitude IS NULL)),
    -- A partitioned table's key must hold the partition column; id leads, so lookups by id use it.
    PRIMARY KEY (id, species_id)
) PARTITION BY LIST (species_id);
CREATE INDEX ON {table} USING gist (geom);
