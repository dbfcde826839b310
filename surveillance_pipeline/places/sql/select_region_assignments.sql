-- The region of each of the species' points (the record's own, else the point its locality was geocoded
-- to), decided by explicit orders only:
-- within: the covering region with the lowest id (a point on a shared border is in both);
-- nearest (outside every region): the least distance on the spheroid, rounded to the millimetre so that
-- floating-point noise between equidistant regions cannot decide, then the lowest region id.
-- {occurrences} and {geocoded} are the tables (occurrences and geocoded_localities, or assign_points'
-- temporary tables of their shape); {occurrences} has a GiST index on geom.
WITH within_record AS (
    -- Driven by the regions, one after another: ST_Covers keeps an edge index of the polygon it was
    -- last given, so each polygon is indexed once for all the points in its box. Driven by the points,
    -- consecutive tests name different polygons and each is a scan of all of a polygon's edges.
    SELECT covered.id, min(r.region_id) AS region_id
    FROM {regions} AS r
    CROSS JOIN LATERAL (
        SELECT o.id
        FROM {occurrences} AS o
        WHERE o.species_id = %(species_id)s
          AND ST_Covers(r.geom, o.geom)
    ) AS covered
    GROUP BY covered.id
),
within AS MATERIALIZED (
    SELECT o.id,
           CASE WHEN o.geom IS NOT NULL THEN 'record' ELSE 'geocoded' END AS point_source,
           coalesce(o.geom, g.geom) AS geom,
           coalesce(wr.region_id, wg.region_id) AS region_id
    FROM {occurrences} AS o
    LEFT JOIN {geocoded} AS g ON g.species_id = o.species_id AND g.id = o.id AND g.status = 'found'
    LEFT JOIN within_record AS wr ON wr.id = o.id
    -- Geocoded points are few (and not in {occurrences}' index): each is tested on its own.
    LEFT JOIN LATERAL (
        SELECT r.region_id
        FROM {regions} AS r
        WHERE o.geom IS NULL
          AND ST_Covers(r.geom, g.geom)
        ORDER BY r.region_id
        LIMIT 1
    ) AS wg ON true
    WHERE o.species_id = %(species_id)s
      AND coalesce(o.geom, g.geom) IS NOT NULL
),
-- Outside every region: the planar nearest region (the GiST index's <->, ties in any order) only bounds
-- the search. Its spheroid distance is at least the minimum, so every region at the minimum lies within
-- that bound (plus a metre of slack for rounding, and a box test that PostGIS's own ST_DWithin uses);
-- the order among those candidates is the explicit one above. The points go in the order of their
-- planar nearest region, so consecutive ST_Distance calls name the same region and PostGIS keeps its
-- edge tree between them (in id order each call rebuilds it: 10x slower on Natural Earth's states).
outside AS MATERIALIZED (
    SELECT w.id, w.geom, k.region_id AS planar_nearest
    FROM within AS w
    CROSS JOIN LATERAL (
        SELECT r.region_id
        FROM {regions} AS r
        ORDER BY r.geom <-> w.geom
        LIMIT 1
    ) AS k
    WHERE w.region_id IS NULL
    ORDER BY k.region_id, w.id
),
-- The spheroid distance to the planar nearest region, once per point (inlined into the search below, it
-- would be computed for the box test, the filter and the sort alike), still in that region's order.
bounded AS MATERIALIZED (
    SELECT o.id, o.geom, o.planar_nearest, ST_Distance(r.geog, o.geom::geography) AS bound_m
    FROM outside AS o
    JOIN {regions} AS r ON r.region_id = o.planar_nearest
),
nearest AS (
    SELECT b.id, n.region_id, n.distance_m
    FROM bounded AS b
    CROSS JOIN LATERAL (
        SELECT c.region_id, round(c.distance_m::numeric, 3) AS distance_m
        FROM (
            SELECT r.region_id,
                   CASE WHEN r.region_id = b.planar_nearest THEN b.bound_m
                        ELSE ST_Distance(r.geog, b.geom::geography) END AS distance_m
            FROM {regions} AS r
            -- The box test ST_DWithin(r.geog, point, bound) makes of its index, without its distance.
            WHERE r.geog && _ST_Expand(b.geom::geography, b.bound_m + 1.0)
        ) AS c
        WHERE c.distance_m <= b.bound_m + 1.0
        ORDER BY 2, c.region_id
        LIMIT 1
    ) AS n
)
SELECT w.id,
       w.point_source,
       w.geom,
       coalesce(w.region_id, n.region_id) AS region_id,
       CASE WHEN w.region_id IS NOT NULL THEN 'within' ELSE 'nearest' END AS method,
       CASE WHEN w.region_id IS NOT NULL THEN 0 ELSE n.distance_m END::double precision AS distance_m
FROM within AS w
LEFT JOIN nearest AS n ON n.id = w.id
ORDER BY w.id
