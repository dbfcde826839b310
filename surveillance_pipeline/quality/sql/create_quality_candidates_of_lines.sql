-- The records of a species whose quality row may differ from the one {held} keeps, when only the
-- records changed and the lines its held rows were made from are known (core/line_digests.py): only the
-- changed and new lines are in incoming_quality_terms, and the records whose line went are in
-- incoming_gone_records. Every other record's line is the one its held row was made from, so its terms
-- are the held ones. A record is a candidate (as in create_quality_candidates.sql) when
--   its line changed and its terms differ from its held row's (or it has none);
--   its line went, or occurrences ({occurrences}) no longer keeps it;
--   its old flag or its site's outliers verdict (incoming_outliers) differs from its held row's;
--   or it shares a duplicates group (dataset, point) with one of those, before or after.
-- terms_not_held: a record occurrences keeps with neither a changed line nor a held row (occurrences took
-- it in since, its line unchanged): its terms are nowhere here, and the caller makes every row instead.
CREATE TEMPORARY TABLE quality_candidates ON COMMIT DROP AS
WITH now AS MATERIALIZED (
    -- The changed lines of records occurrences keeps, cast as insert_occurrence_quality.sql casts them (and
    -- compared below as create_quality_candidates.sql compares them: a term added there is added here).
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
held AS MATERIALIZED (
    SELECT id, dataset_key, decimal_longitude, decimal_latitude, flag_old, flag_outliers
    FROM {held}
    WHERE species_id = %(species_id)s
),
changed AS MATERIALIZED (
    SELECT n.id,
           n.dataset_key, n.lon, n.lat,
           h.dataset_key AS held_dataset_key, h.decimal_longitude AS held_lon, h.decimal_latitude AS held_lat,
           false AS terms_not_held
    FROM now AS n
    LEFT JOIN {held} AS h ON h.species_id = %(species_id)s AND h.id = n.id
    -- The site's verdict as insert_occurrence_quality.sql joins it.
    LEFT JOIN incoming_outliers AS m
           ON m.lon = CASE WHEN %(outliers_thinned)s
                           THEN (floor(n.lon / %(outliers_cell_degrees)s) + 0.5) * %(outliers_cell_degrees)s
                           ELSE n.lon END
          AND m.lat = CASE WHEN %(outliers_thinned)s
                           THEN (floor(n.lat / %(outliers_cell_degrees)s) + 0.5) * %(outliers_cell_degrees)s
                           ELSE n.lat END
    WHERE h.id IS NULL
       OR (n.basis_of_record, n.occurrence_status, n.establishment_means, n.individual_count, n.event_date,
           n.country_code, n.dataset_key, n.institution_code, n.coordinate_uncertainty_m,
           n.coordinate_precision, n.lon, n.lat)
          IS DISTINCT FROM
          (h.basis_of_record, h.occurrence_status, h.establishment_means, h.individual_count, h.event_date,
           h.country_code, h.dataset_key, h.institution_code, h.coordinate_uncertainty_m,
           h.coordinate_precision, h.decimal_longitude, h.decimal_latitude)
       OR NOT (n.issues <@ h.issues AND n.issues @> h.issues)
       OR n.flag_old IS DISTINCT FROM h.flag_old
       OR CASE WHEN %(on_outliers)s THEN m.outlier END IS DISTINCT FROM h.flag_outliers
    UNION ALL
    -- Every other record, held or kept by occurrences (a changed line of a record occurrences keeps was
    -- judged above): its terms are its held row's.
    SELECT coalesce(h.id, o.id),
           NULL, NULL, NULL,
           h.dataset_key, h.decimal_longitude, h.decimal_latitude,
           h.id IS NULL
    FROM held AS h
    FULL JOIN (SELECT id, year FROM {occurrences}) AS o ON o.id = h.id
    LEFT JOIN incoming_gone_records AS g ON g.id = coalesce(h.id, o.id)
    LEFT JOIN now AS n ON n.id = o.id
    LEFT JOIN incoming_outliers AS m
           ON m.lon = CASE WHEN %(outliers_thinned)s
                           THEN (floor(h.decimal_longitude / %(outliers_cell_degrees)s) + 0.5)
                                * %(outliers_cell_degrees)s
                           ELSE h.decimal_longitude END
          AND m.lat = CASE WHEN %(outliers_thinned)s
                           THEN (floor(h.decimal_latitude / %(outliers_cell_degrees)s) + 0.5)
                                * %(outliers_cell_degrees)s
                           ELSE h.decimal_latitude END
    WHERE n.id IS NULL
      AND CASE
              -- Kept by occurrences, held by nobody: not a record (its line went), or one without terms.
              WHEN h.id IS NULL THEN g.id IS NULL
              -- Held, and no longer kept by occurrences.
              WHEN o.id IS NULL THEN true
              -- Held and kept, its line unchanged (a changed one is in now) or gone.
              ELSE g.id IS NOT NULL
                   OR CASE WHEN %(on_old)s AND o.year IS NOT NULL THEN o.year < %(old_before_year)s END
                      IS DISTINCT FROM h.flag_old
                   OR CASE WHEN %(on_outliers)s THEN m.outlier END IS DISTINCT FROM h.flag_outliers
          END
),
groups AS (
    SELECT dataset_key, lon, lat FROM changed WHERE lon IS NOT NULL
    UNION
    SELECT held_dataset_key, held_lon, held_lat FROM changed WHERE held_lon IS NOT NULL
)
SELECT id, bool_or(terms_not_held) AS terms_not_held
FROM (
    SELECT id, terms_not_held FROM changed
    UNION ALL
    SELECT n.id, false
    FROM now AS n
    JOIN groups AS g
      ON g.lon = n.lon AND g.lat IS NOT DISTINCT FROM n.lat
     AND g.dataset_key IS NOT DISTINCT FROM n.dataset_key
    UNION ALL
    SELECT h.id, false
    FROM held AS h
    JOIN groups AS g
      ON g.lon = h.decimal_longitude AND g.lat IS NOT DISTINCT FROM h.decimal_latitude
     AND g.dataset_key IS NOT DISTINCT FROM h.dataset_key
) AS candidates
GROUP BY id
