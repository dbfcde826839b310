-- The fresh table one species' rows are loaded into before it becomes that species' partition: the
-- parent's columns and named constraints, plus a CHECK that proves the partition bound (so ATTACH
-- does not scan the rows). No indexes yet: index_occurrences_partition builds them after the load.
CREATE TABLE {fresh} (
    id          bigint           NOT NULL,
    species_id  integer          NOT NULL CHECK (species_id = {species_id}),
    year        integer,
    longitude   double precision,
    latitude    double precision,
    license     text,
    geom        geometry(Point, 4326),
    CONSTRAINT geom_matches_coordinates CHECK ((geom IS NULL) = (longitude IS NULL AND latitude IS NULL))
)
