-- occurrences, schema version 1. {table} is the table identifier, bound by the driver.
CREATE TABLE IF NOT EXISTS species (
    species_id      integer PRIMARY KEY,
    slug            text    NOT NULL UNIQUE,
    scientific_name text    NOT NULL,
    vernacular_name text,
    taxon_key       bigint
);

CREATE TABLE {table} (
    id          bigint           PRIMARY KEY,  -- GBIF's gbifID
    species_id  integer          NOT NULL,
    year        integer,
    longitude   double precision,
    latitude    double precision,
    license     text,
    geom        geometry(Point, 4326),
    CHECK ((geom IS NULL) = (longitude IS NULL AND latitude IS NULL))
);
CREATE INDEX ON {table} (species_id);
CREATE INDEX ON {table} USING gist (geom);
