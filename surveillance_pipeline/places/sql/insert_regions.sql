-- Repaired (ST_MakeValid) and reduced to its polygons, as a layer may hold a self-intersecting ring.
INSERT INTO {table} (region_id, name, geom, geog)
SELECT region_id, name, geom, geom::geography
FROM (
    SELECT region_id,
           name,
           ST_Multi(ST_CollectionExtract(ST_MakeValid(ST_SetSRID(ST_GeomFromWKB(wkb), 4326)), 3)) AS geom
    FROM incoming_regions
) AS repaired
ORDER BY region_id
