-- The region of each point in assignment_points, decided by explicit orders only:
-- within: the covering region with the lowest id (a point on a shared border is in both);
-- nearest (outside every region): the least distance on the spheroid, rounded to the millimetre so that
-- floating-point noise between equidistant regions cannot decide, then the lowest region id.
-- The planar nearest region (index-assisted <->) only bounds the search: its spheroid distance is at
-- least the minimum, so every region at the minimum lies within that bound (plus a metre of slack for
-- the two functions' rounding); the order among those candidates is the explicit one above.
SELECT p.id,
       p.point_source,
       coalesce(w.region_id, n.region_id) AS region_id,
       CASE WHEN w.region_id IS NOT NULL THEN 'within' ELSE 'nearest' END AS method,
       CASE WHEN w.region_id IS NOT NULL THEN 0 ELSE n.distance_m END::double precision AS distance_m
FROM assignment_points AS p
LEFT JOIN LATERAL (
    SELECT r.region_id
    FROM {regions} AS r
    WHERE ST_Covers(r.geom, p.geom)
    ORDER BY r.region_id
    LIMIT 1
) AS w ON true
LEFT JOIN LATERAL (
    SELECT ST_Distance(r.geog, p.geom::geography) AS bound_m
    FROM {regions} AS r
    WHERE w.region_id IS NULL
    ORDER BY r.geom <-> p.geom, r.region_id
    LIMIT 1
) AS b ON true
LEFT JOIN LATERAL (
    SELECT r.region_id, round(ST_Distance(r.geog, p.geom::geography)::numeric, 3) AS distance_m
    FROM {regions} AS r
    WHERE w.region_id IS NULL
      AND ST_DWithin(r.geog, p.geom::geography, b.bound_m + 1.0)
    ORDER BY distance_m, r.region_id
    LIMIT 1
) AS n ON true
ORDER BY p.id
