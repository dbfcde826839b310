-- The distinct points of a species' kept records ({occurrences}: its partition), with their records.
SELECT t."decimalLongitude"::double precision AS lon, t."decimalLatitude"::double precision AS lat, count(*)
FROM incoming_quality_terms AS t
JOIN {occurrences} AS o ON o.id = t.key::bigint
WHERE t."decimalLongitude" IS NOT NULL AND t."decimalLatitude" IS NOT NULL
GROUP BY 1, 2
ORDER BY 1, 2
