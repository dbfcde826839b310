-- region_assignment, schema version 3. {table} is the table identifier, bound by the driver.
-- Keyed by species and id, as occurrences is (one gbifID can be two species' record: see
-- create_geocoded_localities.sql). Schema 3 keeps the point each record was assigned by: a later input
-- reassigns only the records whose point differs (regions.py, a record-level delta).
CREATE TABLE {table} (
    id            bigint           NOT NULL,  -- GBIF's gbifID
    species_id    integer          NOT NULL,
    point_source  text             NOT NULL CHECK (point_source IN ('record', 'geocoded')),
    geom          geometry(Point, 4326) NOT NULL,  -- the point assigned: the record's, else its geocoded one
    region_id     text COLLATE "C" NOT NULL,
    method        text             NOT NULL CHECK (method IN ('within', 'nearest')),
    distance_m    double precision NOT NULL,  -- 0 within; metres on the WGS84 spheroid when nearest
    PRIMARY KEY (species_id, id)
);
