-- quality_references, schema version 1: the Natural Earth layers the quality tests read, one row per
-- piece. Polygons are cut into pieces of at most 256 vertices (ST_Subdivide), so a point-in-polygon test
-- reads a small piece found by the index instead of a whole continent's outline. geog is the same piece
-- as geography, for tests in geodesic metres (ST_DWithin on geography, spheroid).
-- layer: countries (code: ISO 3166-1 alpha-2), land, urban, capitals (points, code: the country's),
-- country_centroids and province_centroids (points: ST_Centroid of the whole feature, code: the country's),
-- and land_cells, country_cells: the grid cells (cell_x, cell_y: floor of degrees over the cell's side) that
-- one piece of land, or of a country (code), covers whole. A point in such a cell is on land, or in that
-- country, without a polygon test: a hash join settles most points, the pieces the rest.
CREATE TABLE {table} (
    layer   text                        NOT NULL,
    piece   integer                     NOT NULL,
    feature integer                     NOT NULL,
    code    text COLLATE "C",
    name    text,
    geom    geometry(Geometry, 4326),
    geog    geography(Geometry, 4326),
    cell_x  integer,
    cell_y  integer,
    CONSTRAINT a_piece_or_a_cell
        CHECK ((geom IS NULL) = (cell_x IS NOT NULL) AND (geog IS NULL) = (geom IS NULL)),
    PRIMARY KEY (layer, piece)
);
-- One index per layer and kind of test: a probe then reads its layer's tree alone (with one index over
-- every layer the planner AND-ed it with the primary key's 2,044 rows of countries: 0.17 ms a probe).
CREATE INDEX ON {table} USING gist (geom) WHERE layer = 'land';
CREATE INDEX ON {table} USING gist (geog) WHERE layer = 'land';
CREATE INDEX ON {table} USING gist (geom) WHERE layer = 'countries';
CREATE INDEX ON {table} USING gist (geog) WHERE layer = 'countries';
CREATE INDEX ON {table} USING gist (geom) WHERE layer = 'urban';
CREATE INDEX ON {table} USING gist (geog) WHERE layer = 'capitals';
CREATE INDEX ON {table} USING gist (geog) WHERE layer IN ('country_centroids', 'province_centroids');
CREATE INDEX ON {table} (layer, cell_x, cell_y, code) WHERE cell_x IS NOT NULL;
