-- The bench's points for region_assignment, one row per record of the bench species, from the loaded
-- regions whose id is LIKE %(regions)s: %(inside)s points inside them (ST_GeneratePoints, seeded, each
-- region's share by its area on the spheroid), %(sea)s points in the sea within %(band)s degrees of their
-- coast, %(missing)s records without coordinates, a third of which were geocoded to a point inside one of
-- the regions. Ids follow an md5 of each point's origin, so records are not in space order, as GBIF's are
-- not.
CREATE TABLE {table} AS
WITH chosen AS (
    SELECT region_id, geom, ST_Area(geog) AS area
    FROM regions
    WHERE region_id LIKE %(regions)s
),
shares AS (
    SELECT region_id, geom, round(%(inside)s * area / sum(area) OVER ())::integer AS n
    FROM chosen
),
land AS (
    SELECT ST_Union(geom) AS geom FROM chosen
),
generated AS (
    SELECT 'in:' || region_id AS origin, ST_GeneratePoints(geom, n, %(seed)s) AS points
    FROM shares
    WHERE n > 0
    UNION ALL
    SELECT 'sea', ST_GeneratePoints(ST_Difference(ST_Buffer(geom, %(band)s), geom), %(sea)s, %(seed)s)
    FROM land
    WHERE %(sea)s > 0
),
dumped AS (
    SELECT origin || ':' || (d).path[1] AS origin, (d).geom AS geom
    FROM (SELECT origin, ST_Dump(points) AS d FROM generated) AS points
    UNION ALL
    SELECT 'none:' || i, NULL
    FROM generate_series(1, %(missing)s) AS i
),
places AS (
    SELECT row_number() OVER (ORDER BY region_id) - 1 AS place, ST_PointOnSurface(geom) AS geom
    FROM chosen
),
numbered AS (
    SELECT %(first_id)s + 7 * row_number() OVER (ORDER BY md5(origin)) AS id, origin, geom
    FROM dumped
)
SELECT n.id,
       ST_X(n.geom) AS longitude,
       ST_Y(n.geom) AS latitude,
       CASE WHEN n.geom IS NULL AND mod(n.id, 3) = 0 THEN 'found'
            WHEN n.geom IS NULL AND mod(n.id, 3) = 1 THEN 'not_found' END AS geocoded_status,
       CASE WHEN n.geom IS NULL AND mod(n.id, 3) = 0 THEN p.geom END AS geocoded_geom
FROM numbered AS n
LEFT JOIN places AS p ON p.place = mod(n.id, (SELECT count(*) FROM places))
