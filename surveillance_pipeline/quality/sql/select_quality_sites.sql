-- The sites of a species' kept records ({occurrences}: its partition), with their records: the distinct
-- points, or, when thinned, the centres of square cells of the given side in degrees, grouped here so that
-- no more than the sites reach Python. At most the limit and one more rows: one more says "thin".
SELECT site_longitude, site_latitude, count(*)
FROM (
    SELECT CASE WHEN %(thinned)s THEN (floor(lon / %(cell)s) + 0.5) * %(cell)s ELSE lon END AS site_longitude,
           CASE WHEN %(thinned)s THEN (floor(lat / %(cell)s) + 0.5) * %(cell)s ELSE lat END AS site_latitude
    FROM (
        SELECT t."decimalLongitude"::double precision AS lon, t."decimalLatitude"::double precision AS lat
        FROM incoming_quality_terms AS t
        JOIN {occurrences} AS o ON o.id = t.key::bigint
        WHERE t."decimalLongitude" IS NOT NULL AND t."decimalLatitude" IS NOT NULL
    ) AS points
) AS sites
GROUP BY 1, 2
ORDER BY 1, 2
LIMIT %(most)s
