-- The plain statement for region_assignment, written point by point as most users would: from occurrences
-- (and geocoded points) into {table}, a table shaped and indexed like region_assignment. Within: the
-- covering region with the lowest id. Outside every region: among the %(k)s nearest regions by the GiST
-- index's planar <->, the least spheroid distance rounded to the millimetre, then the lowest id.
INSERT INTO {table} (id, species_id, point_source, geom, region_id, method, distance_m)
SELECT p.id,
       %(species_id)s,
       p.point_source,
       p.geom,
       coalesce(w.region_id, n.region_id),
       CASE WHEN w.region_id IS NOT NULL THEN 'within' ELSE 'nearest' END,
       CASE WHEN w.region_id IS NOT NULL THEN 0 ELSE n.distance_m END::double precision
FROM (
    SELECT o.id,
           CASE WHEN o.geom IS NOT NULL THEN 'record' ELSE 'geocoded' END AS point_source,
           coalesce(o.geom, g.geom) AS geom
    FROM {occurrences} AS o
    LEFT JOIN {geocoded} AS g ON g.id = o.id AND g.status = 'found'
    WHERE o.species_id = %(species_id)s
      AND coalesce(o.geom, g.geom) IS NOT NULL
) AS p
LEFT JOIN LATERAL (
    SELECT r.region_id
    FROM {regions} AS r
    WHERE ST_Covers(r.geom, p.geom)
    ORDER BY r.region_id
    LIMIT 1
) AS w ON true
LEFT JOIN LATERAL (
    SELECT c.region_id, round(ST_Distance(c.geog, p.geom::geography)::numeric, 3) AS distance_m
    FROM (
        SELECT r.region_id, r.geog
        FROM {regions} AS r
        WHERE w.region_id IS NULL
        ORDER BY r.geom <-> p.geom
        LIMIT %(k)s
    ) AS c
    ORDER BY distance_m, c.region_id
    LIMIT 1
) AS n ON true
