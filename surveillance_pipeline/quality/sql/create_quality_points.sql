-- The distinct points of a species' kept records ({occurrences}: its partition), each with its records,
-- made in one pass over the records: the outliers test's sites are these points, or the cells they fall
-- in (select_quality_sites.sql). (Two passes, the points up to the limit and then the cells, took 2.4 and
-- 2.5 s for the largest species of the bench's 5M download.)
CREATE TEMPORARY TABLE quality_points ON COMMIT DROP AS
SELECT t."decimalLongitude"::double precision AS lon,
       t."decimalLatitude"::double precision AS lat,
       count(*) AS records
FROM incoming_quality_terms AS t
JOIN {occurrences} AS o ON o.id = t.key::bigint
WHERE t."decimalLongitude" IS NOT NULL AND t."decimalLatitude" IS NOT NULL
GROUP BY 1, 2
