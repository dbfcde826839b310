-- occurrences, schema version 1. {occurrences} is the table identifier, bound by the driver.
CREATE TABLE IF NOT EXISTS species (
    species_id      integer PRIMARY KEY,
    slug            text    NOT NULL UNIQUE,
    scientific_name text    NOT NULL,
    vernacular_name text,
    taxon_key       bigint
);

CREATE TABLE {occurrences} (
    id          bigint           PRIMARY KEY,  -- GBIF's gbifID
    species_id  integer          NOT NULL,
    year        integer,
    longitude   double precision,
    latitude    double precision,
    license     text,
    geom        geometry(Point, 4326),
    CHECK ((geom IS NULL) = (longitude IS NULL AND latitude IS NULL))
);
CREATE INDEX ON {occurrences} (species_id);
CREATE INDEX ON {occurrences} USING gist (geom);
