-- One species' quality rows into {table}: the terms of its records (incoming_quality_terms) for the
-- records its occurrences partition ({occurrences}) holds, one flag per test, and the first reason.
-- A flag is null where its test is off (its on_ parameter false) or the record lacks what the test reads.
-- The spatial tests run once per distinct point (and countryCode), against {references}'s pieces through
-- their GiST indexes; distances are geodesic metres on the WGS84 spheroid (geography). The outliers test
-- is decided per site beforehand (quality/outliers.py) and read from incoming_outliers.
INSERT INTO {table} (
    id, species_id, basis_of_record, occurrence_status, establishment_means, individual_count, event_date,
    country_code, dataset_key, institution_code, coordinate_uncertainty_m, coordinate_precision, issues,
    decimal_longitude, decimal_latitude,
    flag_gbif_issues, flag_basis, flag_uncertainty, flag_precision, flag_old, flag_zero, flag_equal,
    flag_capitals, flag_centroids, flag_gbif_hq, flag_sea, flag_urban, flag_country, flag_duplicates,
    flag_outliers, first_flag
)
WITH records AS (
    SELECT o.id,
           o.year,
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
           ARRAY(
               SELECT DISTINCT btrim(issue) COLLATE "C"
               FROM unnest(string_to_array(t.issues, ';')) AS issue
               WHERE btrim(issue) <> ''
               ORDER BY 1
           ) AS issues,
           t."decimalLongitude"::double precision AS lon,
           t."decimalLatitude"::double precision AS lat
    FROM incoming_quality_terms AS t
    JOIN {occurrences} AS o ON o.id = t.key::bigint
),
located AS (
    SELECT lon, lat, country_code, ST_SetSRID(ST_MakePoint(lon, lat), 4326)::geography AS geog,
           ST_SetSRID(ST_MakePoint(lon, lat), 4326) AS geom
    FROM (SELECT DISTINCT lon, lat, country_code FROM records WHERE lon IS NOT NULL) AS points
),
spatial AS (
    SELECT p.lon,
           p.lat,
           p.country_code,
           CASE WHEN %(on_capitals)s THEN EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer = 'capitals' AND ST_DWithin(r.geog, p.geog, %(capitals_radius_m)s)
           ) END AS capitals,
           CASE WHEN %(on_centroids)s THEN EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer IN ('country_centroids', 'province_centroids')
                 AND ST_DWithin(r.geog, p.geog, %(centroids_radius_m)s)
           ) END AS centroids,
           CASE WHEN %(on_gbif_hq)s THEN ST_DWithin(
               ST_SetSRID(ST_MakePoint(%(hq_longitude)s, %(hq_latitude)s), 4326)::geography,
               p.geog,
               %(gbif_hq_radius_m)s
           ) END AS gbif_hq,
           CASE WHEN %(on_sea)s AND %(terrestrial)s THEN NOT p.near_land END AS sea,
           CASE WHEN %(on_urban)s THEN EXISTS (
               SELECT 1 FROM {references} AS r WHERE r.layer = 'urban' AND ST_Intersects(r.geom, p.geom)
           ) END AS urban,
           -- Not evaluated for a record without countryCode, with one the layer has no polygon for, or at
           -- sea for a species that lives in water (a country's waters are not in its land polygon).
           CASE WHEN %(on_country)s AND (%(terrestrial)s OR p.near_land) AND EXISTS (
               SELECT 1 FROM {references} AS r WHERE r.layer = 'countries' AND r.code = p.country_code
           ) THEN NOT (
               EXISTS (
                   SELECT 1 FROM {references} AS r
                   WHERE r.layer = 'countries' AND r.code = p.country_code AND ST_Intersects(r.geom, p.geom)
               )
               OR EXISTS (
                   SELECT 1 FROM {references} AS r
                   WHERE r.layer = 'countries' AND r.code = p.country_code
                     AND ST_DWithin(r.geog, p.geog, %(country_buffer_m)s)
               )
           ) END AS country
    FROM (
        SELECT l.*,
               -- On land, or within the sea test's buffer of it: the first test settles most points.
               CASE WHEN %(on_sea)s OR %(on_country)s THEN (
                   EXISTS (
                       SELECT 1 FROM {references} AS r WHERE r.layer = 'land' AND ST_Intersects(r.geom, l.geom)
                   )
                   OR EXISTS (
                       SELECT 1 FROM {references} AS r
                       WHERE r.layer = 'land' AND ST_DWithin(r.geog, l.geog, %(sea_buffer_m)s)
                   )
               ) END AS near_land
        FROM located AS l
    ) AS p
),
duplicates AS (
    -- The first record (lowest gbifID) of each dataset at each point stays unflagged.
    SELECT id, row_number() OVER (PARTITION BY dataset_key, lon, lat ORDER BY id) > 1 AS duplicate
    FROM records
    WHERE lon IS NOT NULL
),
flagged AS (
    SELECT r.*,
           CASE WHEN %(on_gbif_issues)s THEN r.issues && %(gbif_issues)s::text[] END AS flag_gbif_issues,
           CASE WHEN %(on_basis)s AND r.basis_of_record IS NOT NULL
                THEN r.basis_of_record = ANY(%(basis_of_record)s::text[]) END AS flag_basis,
           CASE WHEN %(on_uncertainty)s AND r.coordinate_uncertainty_m IS NOT NULL
                THEN r.coordinate_uncertainty_m > %(uncertainty_limit_m)s
                     OR r.coordinate_uncertainty_m = ANY(%(uncertainty_placeholders_m)s::double precision[])
           END AS flag_uncertainty,
           CASE WHEN %(on_precision)s AND r.coordinate_precision IS NOT NULL
                THEN r.coordinate_precision > %(precision_limit_degrees)s END AS flag_precision,
           CASE WHEN %(on_old)s AND r.year IS NOT NULL THEN r.year < %(old_before_year)s END AS flag_old,
           CASE WHEN %(on_zero)s AND r.lon IS NOT NULL
                THEN sqrt(r.lon * r.lon + r.lat * r.lat) <= %(zero_radius_degrees)s END AS flag_zero,
           CASE WHEN %(on_equal)s AND r.lon IS NOT NULL THEN abs(r.lat) = abs(r.lon) END AS flag_equal,
           s.capitals AS flag_capitals,
           s.centroids AS flag_centroids,
           s.gbif_hq AS flag_gbif_hq,
           s.sea AS flag_sea,
           s.urban AS flag_urban,
           s.country AS flag_country,
           CASE WHEN %(on_duplicates)s THEN d.duplicate END AS flag_duplicates,
           CASE WHEN %(on_outliers)s THEN m.outlier END AS flag_outliers
    FROM records AS r
    LEFT JOIN spatial AS s
           ON s.lon = r.lon AND s.lat = r.lat AND s.country_code IS NOT DISTINCT FROM r.country_code
    LEFT JOIN duplicates AS d ON d.id = r.id
    -- A record's site: its point, or its cell's centre (computed as select_quality_sites.sql computes it).
    LEFT JOIN incoming_outliers AS m
           ON m.lon = CASE WHEN %(outliers_thinned)s
                           THEN (floor(r.lon / %(outliers_cell_degrees)s) + 0.5) * %(outliers_cell_degrees)s
                           ELSE r.lon END
          AND m.lat = CASE WHEN %(outliers_thinned)s
                           THEN (floor(r.lat / %(outliers_cell_degrees)s) + 0.5) * %(outliers_cell_degrees)s
                           ELSE r.lat END
)
SELECT id, %(species_id)s, basis_of_record, occurrence_status, establishment_means, individual_count,
       event_date, country_code, dataset_key, institution_code, coordinate_uncertainty_m,
       coordinate_precision, issues, lon, lat,
       flag_gbif_issues, flag_basis, flag_uncertainty, flag_precision, flag_old, flag_zero, flag_equal,
       flag_capitals, flag_centroids, flag_gbif_hq, flag_sea, flag_urban, flag_country, flag_duplicates,
       flag_outliers,
       CASE WHEN flag_gbif_issues THEN 'gbif_issues'
            WHEN flag_basis THEN 'basis'
            WHEN flag_uncertainty THEN 'uncertainty'
            WHEN flag_precision THEN 'precision'
            WHEN flag_old THEN 'old'
            WHEN flag_zero THEN 'zero'
            WHEN flag_equal THEN 'equal'
            WHEN flag_capitals THEN 'capitals'
            WHEN flag_centroids THEN 'centroids'
            WHEN flag_gbif_hq THEN 'gbif_hq'
            WHEN flag_sea THEN 'sea'
            WHEN flag_urban THEN 'urban'
            WHEN flag_country THEN 'country'
            WHEN flag_duplicates THEN 'duplicates'
            WHEN flag_outliers THEN 'outliers'
       END
FROM flagged
ORDER BY id
