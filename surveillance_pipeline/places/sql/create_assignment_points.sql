-- Points to assign, in tables of the shape select_region_assignments reads: the points as records of one
-- species (with occurrences' GiST index on geom; a record without a point takes its geocoded one), and
-- their geocoded points. assign_points fills the first only; a delta (regions.py) fills both with the
-- records whose point changed.
CREATE TEMPORARY TABLE assignment_points (
    id         bigint  PRIMARY KEY,
    species_id integer NOT NULL,
    geom       geometry(Point, 4326)
) ON COMMIT DROP;
CREATE INDEX ON assignment_points USING gist (geom);
CREATE TEMPORARY TABLE assignment_geocoded (
    id         bigint  PRIMARY KEY,
    species_id integer NOT NULL,
    status     text    NOT NULL,
    geom       geometry(Point, 4326)
) ON COMMIT DROP
