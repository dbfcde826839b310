-- quality_references, schema version 1: the Natural Earth layers the quality tests read, one row per
-- piece. Polygons are cut into pieces of at most 256 vertices (ST_Subdivide), so a point-in-polygon test
-- reads a small piece found by the index instead of a whole continent's outline. geog is the same piece
-- as geography, for tests in geodesic metres (ST_DWithin on geography, spheroid).
-- layer: countries (code: ISO 3166-1 alpha-2), land, urban, capitals (points, code: the country's),
-- country_centroids and province_centroids (points: ST_Centroid of the whole feature, code: the country's).
CREATE TABLE {table} (
    layer   text                        NOT NULL,
    piece   integer                     NOT NULL,
    feature integer                     NOT NULL,
    code    text COLLATE "C",
    name    text,
    geom    geometry(Geometry, 4326)    NOT NULL,
    geog    geography(Geometry, 4326)   NOT NULL,
    PRIMARY KEY (layer, piece)
);
CREATE INDEX ON {table} USING gist (geom);
CREATE INDEX ON {table} USING gist (geog);
