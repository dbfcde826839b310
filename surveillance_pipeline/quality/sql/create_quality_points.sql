-- The distinct points of a species' kept records ({occurrences}: its partition), each with its records,
-- made in one pass over the records: the outliers test's sites are these points, or the cells they fall
-- in (select_quality_sites.sql). (Two passes, the points up to the limit and then the cells, took 2.4 and
-- 2.5 s for the largest species of the bench's 5M download.)
-- With points_from_occurrences (occurrences' rows were derived from these terms, flags.py's
-- occurrences_made_from), a record occurrences gave a point has its terms' point there, the same double:
-- it is read from occurrences alone, and only the records occurrences keeps without a point (published at
-- 0,0) are joined with their terms. (The 71 species of the bench's 1M download: 1.9 s against 2.9 s, one
-- after another, the same points, 2026-12-07.)
-- With terms_from_held (a delta that copied in only the changed lines, core/line_digests.py), a record
-- whose line did not change has its terms' point in its held row in {held}: the same cast of the same text.
CREATE TEMPORARY TABLE quality_points ON COMMIT DROP AS
SELECT lon, lat, count(*) AS records
FROM (
    SELECT o.longitude AS lon, o.latitude AS lat
    FROM {occurrences} AS o
    WHERE %(points_from_occurrences)s AND o.longitude IS NOT NULL
    UNION ALL
    SELECT t."decimalLongitude"::double precision,
           t."decimalLatitude"::double precision
    FROM incoming_quality_terms AS t
    JOIN {occurrences} AS o ON o.id = t.key::bigint
    WHERE NOT %(points_from_occurrences)s OR o.longitude IS NULL
    UNION ALL
    SELECT h.decimal_longitude, h.decimal_latitude
    FROM {held} AS h
    JOIN {occurrences} AS o ON o.id = h.id
    WHERE %(terms_from_held)s AND h.species_id = %(species_id)s
      AND (NOT %(points_from_occurrences)s OR o.longitude IS NULL)
      AND NOT EXISTS (SELECT 1 FROM incoming_quality_terms AS t WHERE t.key::bigint = h.id)
      AND NOT EXISTS (SELECT 1 FROM incoming_gone_records AS g WHERE g.id = h.id)
) AS records
WHERE lon IS NOT NULL AND lat IS NOT NULL
GROUP BY 1, 2
