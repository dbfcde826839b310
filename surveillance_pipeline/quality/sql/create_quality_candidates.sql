-- The records of a species whose quality row may differ from the one {held} keeps, when only the
-- records changed (the config, the layers and the habitat those the held rows were made under): a row
-- is made from its record's terms, its year (through the old test alone), its site's outliers verdict
-- and its duplicates group, so a record is a candidate when
--   its terms as held differ (or it is new, or gone: no longer in the input or in {occurrences}),
--   its old flag or its site's outliers verdict (incoming_outliers, made for every site) differs,
--   or it shares a duplicates group (dataset, point) with one of those, before or after: the group's
--   first record by gbifID may be another now.
-- A record whose terms differ in text but not in value (an issue written with spaces about it) is a
-- candidate too: its row comes out the same and the delta writes nothing for it.
-- The terms are cast as insert_occurrence_quality.sql's records CTE casts them: a term added to the row
-- there must be compared here too.
CREATE TEMPORARY TABLE quality_candidates ON COMMIT DROP AS
WITH now AS MATERIALIZED (
    SELECT t.key::bigint AS id,
           t."basisOfRecord" AS basis_of_record,
           t."occurrenceStatus" AS occurrence_status,
           t."establishmentMeans" AS establishment_means,
           t."individualCount"::integer AS individual_count,
           t."eventDate" AS event_date,
           t."countryCode" AS country_code,
           t."datasetKey" AS dataset_key,
           t."institutionCode" AS institution_code,
           t."coordinateUncertaintyInMeters"::double precision AS coordinate_uncertainty_m,
           t."coordinatePrecision"::double precision AS coordinate_precision,
           string_to_array(coalesce(t.issues, ''), ';') AS issues,
           t."decimalLongitude"::double precision AS lon,
           t."decimalLatitude"::double precision AS lat,
           CASE WHEN %(on_old)s AND o.year IS NOT NULL THEN o.year < %(old_before_year)s END AS flag_old
    FROM incoming_quality_terms AS t
    JOIN {occurrences} AS o ON o.id = t.key::bigint
),
changed AS MATERIALIZED (
    SELECT coalesce(n.id, h.id) AS id,
           n.dataset_key, n.lon, n.lat,
           h.dataset_key AS held_dataset_key, h.decimal_longitude AS held_lon, h.decimal_latitude AS held_lat
    FROM now AS n
    FULL JOIN (SELECT * FROM {held} WHERE species_id = %(species_id)s) AS h ON h.id = n.id
    -- The site's verdict as insert_occurrence_quality.sql joins it.
    LEFT JOIN incoming_outliers AS m
           ON m.lon = CASE WHEN %(outliers_thinned)s
                           THEN (floor(n.lon / %(outliers_cell_degrees)s) + 0.5) * %(outliers_cell_degrees)s
                           ELSE n.lon END
          AND m.lat = CASE WHEN %(outliers_thinned)s
                           THEN (floor(n.lat / %(outliers_cell_degrees)s) + 0.5) * %(outliers_cell_degrees)s
                           ELSE n.lat END
    WHERE n.id IS NULL
       OR h.id IS NULL
       OR (n.basis_of_record, n.occurrence_status, n.establishment_means, n.individual_count, n.event_date,
           n.country_code, n.dataset_key, n.institution_code, n.coordinate_uncertainty_m,
           n.coordinate_precision, n.lon, n.lat)
          IS DISTINCT FROM
          (h.basis_of_record, h.occurrence_status, h.establishment_means, h.individual_count, h.event_date,
           h.country_code, h.dataset_key, h.institution_code, h.coordinate_uncertainty_m,
           h.coordinate_precision, h.decimal_longitude, h.decimal_latitude)
       -- The held issues are the published ones trimmed, without empties or repeats, sorted: the same
       -- set both ways is the same array (a set that differs only in how it is written is a candidate).
       OR NOT (n.issues <@ h.issues AND n.issues @> h.issues)
       OR n.flag_old IS DISTINCT FROM h.flag_old
       OR CASE WHEN %(on_outliers)s THEN m.outlier END IS DISTINCT FROM h.flag_outliers
),
groups AS (
    SELECT dataset_key, lon, lat FROM changed WHERE lon IS NOT NULL
    UNION
    SELECT held_dataset_key, held_lon, held_lat FROM changed WHERE held_lon IS NOT NULL
)
SELECT id FROM changed
UNION
SELECT n.id
FROM now AS n
JOIN groups AS g
  ON g.lon = n.lon AND g.lat IS NOT DISTINCT FROM n.lat AND g.dataset_key IS NOT DISTINCT FROM n.dataset_key
