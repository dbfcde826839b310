-- The sites of a species' kept records with their records, from its distinct points (quality_points):
-- the points, or, when thinned, the centres of square cells of the given side in degrees, grouped here so
-- that no more than the sites reach Python.
SELECT CASE WHEN %(thinned)s THEN (floor(lon / %(cell)s) + 0.5) * %(cell)s ELSE lon END AS site_longitude,
       CASE WHEN %(thinned)s THEN (floor(lat / %(cell)s) + 0.5) * %(cell)s ELSE lat END AS site_latitude,
       sum(records)::bigint
FROM quality_points
GROUP BY 1, 2
ORDER BY 1, 2
