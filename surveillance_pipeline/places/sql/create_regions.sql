-- regions, schema version 1: the configured layer's polygons, keyed by the layer's own region id.
-- COLLATE "C" orders ids bytewise, so "lower region id wins" means the same on every server.
CREATE TABLE {table} (
    region_id  text COLLATE "C"          PRIMARY KEY,
    name       text,
    geom       geometry(MultiPolygon, 4326) NOT NULL,
    geog       geography(MultiPolygon, 4326) NOT NULL
);
CREATE INDEX ON {table} USING gist (geom);
CREATE INDEX ON {table} USING gist (geog);
