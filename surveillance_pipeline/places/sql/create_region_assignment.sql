-- region_assignment, schema version 1. {table} is the table identifier, bound by the driver.
CREATE TABLE {table} (
    id            bigint           PRIMARY KEY,  -- GBIF's gbifID
    species_id    integer          NOT NULL,
    point_source  text             NOT NULL CHECK (point_source IN ('record', 'geocoded')),
    region_id     text COLLATE "C" NOT NULL,
    method        text             NOT NULL CHECK (method IN ('within', 'nearest')),
    distance_m    double precision NOT NULL  -- 0 within; metres on the WGS84 spheroid when nearest
);
CREATE INDEX ON {table} (species_id);
