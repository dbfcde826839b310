-- The incoming features as pieces: polygons repaired (ST_MakeValid; one admin-1 ring self-intersects),
-- reduced to their polygons and subdivided; points as they are; centroids of whole countries and provinces
-- (planar, in degrees, as CoordinateCleaner's reference centroids are). Pieces are numbered per layer in
-- a fixed order (feature, then the piece's own text), so the same files give the same rows.
INSERT INTO {table} (layer, piece, feature, code, name, geom, geog)
SELECT layer,
       row_number() OVER (PARTITION BY layer ORDER BY feature, ST_AsEWKB(geom)) AS piece,
       feature,
       code,
       name,
       geom,
       -- As geography every edge is a great-circle arc: a long straight cut of ST_Subdivide (a parallel
       -- 10 degrees long) would bulge off the line the planar piece and its neighbour share, and leave
       -- gaps between them kilometres wide (points inland in Western Australia were 5-12 km "off" land).
       -- Edges cut to at most 0.1 degree follow the planar line to well under a metre.
       ST_Segmentize(geom, 0.1)::geography
FROM (
    SELECT f.layer, f.feature, f.code, f.name, pieces.geom
    FROM (
        SELECT layer, feature, code, name,
               ST_CollectionExtract(ST_MakeValid(ST_SetSRID(ST_GeomFromGeoJSON(geojson), 4326)), 3) AS geom
        FROM incoming_reference_features
        WHERE layer IN ('countries', 'land', 'urban')
    ) AS f
    CROSS JOIN LATERAL (SELECT ST_Subdivide(f.geom, 256) AS geom) AS pieces
    UNION ALL
    SELECT layer, feature, code, name, ST_SetSRID(ST_GeomFromGeoJSON(geojson), 4326)
    FROM incoming_reference_features
    WHERE layer = 'capitals'
    UNION ALL
    SELECT CASE layer WHEN 'countries' THEN 'country_centroids' ELSE 'province_centroids' END,
           feature,
           code,
           name,
           ST_Centroid(ST_MakeValid(ST_SetSRID(ST_GeomFromGeoJSON(geojson), 4326)))
    FROM incoming_reference_features
    WHERE layer IN ('countries', 'provinces')
) AS pieces_of_every_layer
ORDER BY layer, piece
