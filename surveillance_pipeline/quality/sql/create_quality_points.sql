-- The distinct points of a species' kept records ({occurrences}: its partition), each with its records,
-- made in one pass over the records: the outliers test's sites are these points, or the cells they fall
-- in (select_quality_sites.sql). (Two passes, the points up to the limit and then the cells, took 2.4 and
-- 2.5 s for the largest species of the bench's 5M download.) With terms_from_held (a delta that copied
-- in only the changed lines, core/line_digests.py), a record whose line did not change has its point from
-- its held row in {held}: the same cast of the same text.
CREATE TEMPORARY TABLE quality_points ON COMMIT DROP AS
SELECT lon, lat, count(*) AS records
FROM (
    SELECT t."decimalLongitude"::double precision AS lon,
           t."decimalLatitude"::double precision AS lat
    FROM incoming_quality_terms AS t
    JOIN {occurrences} AS o ON o.id = t.key::bigint
    UNION ALL
    SELECT h.decimal_longitude, h.decimal_latitude
    FROM {held} AS h
    JOIN {occurrences} AS o ON o.id = h.id
    WHERE %(terms_from_held)s AND h.species_id = %(species_id)s
      AND NOT EXISTS (SELECT 1 FROM incoming_quality_terms AS t WHERE t.key::bigint = h.id)
      AND NOT EXISTS (SELECT 1 FROM incoming_gone_records AS g WHERE g.id = h.id)
) AS records
WHERE lon IS NOT NULL AND lat IS NOT NULL
GROUP BY 1, 2
