-- The quality tests as a user would write them in plain PostGIS: one statement, every test per record (no
-- distinct points first, no outliers: plain SQL has only the quadratic way), the spatial ones through
-- EXISTS over the same indexed layers, with the defaults written in. {table}: shaped like
-- occurrence_quality; {occurrences}: the species' partition; {references}: quality_references.
INSERT INTO {table}
SELECT r.id, %(species_id)s, r.basis, r.status, r.means, r.individuals, r.event_date, r.country, r.dataset,
       r.institution, r.uncertainty, r.precision, r.issues, r.lon, r.lat,
       r.issues && ARRAY['ZERO_COORDINATE', 'COORDINATE_INVALID', 'COORDINATE_OUT_OF_RANGE',
                         'COUNTRY_COORDINATE_MISMATCH', 'PRESUMED_SWAPPED_COORDINATE',
                         'PRESUMED_NEGATED_LATITUDE', 'PRESUMED_NEGATED_LONGITUDE', 'RECORDED_DATE_INVALID',
                         'TAXON_MATCH_FUZZY', 'TAXON_MATCH_HIGHERRANK', 'TAXON_MATCH_NONE'],
       r.basis IN ('FOSSIL_SPECIMEN', 'LIVING_SPECIMEN'),
       r.uncertainty > 10000 OR r.uncertainty IN (301, 999, 3036, 9999),
       r.precision > 0.01,
       r.year < 1900,
       CASE WHEN r.lon IS NOT NULL THEN sqrt(r.lon * r.lon + r.lat * r.lat) <= 0.5 END,
       CASE WHEN r.lon IS NOT NULL THEN abs(r.lat) = abs(r.lon) END,
       CASE WHEN r.lon IS NOT NULL THEN EXISTS (
           SELECT 1 FROM {references} AS q
           WHERE q.layer = 'capitals' AND ST_DWithin(q.geog, r.geog, 10000)) END,
       CASE WHEN r.lon IS NOT NULL THEN EXISTS (
           SELECT 1 FROM {references} AS q WHERE q.layer IN ('country_centroids', 'province_centroids')
             AND ST_DWithin(q.geog, r.geog, 1000)) END,
       CASE WHEN r.lon IS NOT NULL
            THEN ST_DWithin(ST_SetSRID(ST_MakePoint(12.58, 55.67), 4326)::geography, r.geog, 1000) END,
       CASE WHEN r.lon IS NOT NULL THEN NOT EXISTS (
           SELECT 1 FROM {references} AS q WHERE q.layer = 'land' AND ST_DWithin(q.geog, r.geog, 5000)) END,
       NULL,
       CASE WHEN r.lon IS NOT NULL AND EXISTS (
           SELECT 1 FROM {references} AS q WHERE q.layer = 'countries' AND q.code = r.country)
            THEN NOT EXISTS (
           SELECT 1 FROM {references} AS q WHERE q.layer = 'countries' AND q.code = r.country
             AND ST_DWithin(q.geog, r.geog, 10000)) END,
       CASE WHEN r.lon IS NOT NULL
            THEN row_number() OVER (PARTITION BY r.dataset, r.lon, r.lat ORDER BY r.id) > 1 END,
       NULL,
       NULL
FROM (
    SELECT o.id, o.year, t."basisOfRecord" AS basis, t."occurrenceStatus" AS status,
           t."establishmentMeans" AS means, t."individualCount"::integer AS individuals,
           t."eventDate" AS event_date, t."countryCode" AS country, t."datasetKey" AS dataset,
           t."institutionCode" AS institution,
           t."coordinateUncertaintyInMeters"::double precision AS uncertainty,
           t."coordinatePrecision"::double precision AS precision,
           coalesce(string_to_array(t.issues, ';'), '{{}}') AS issues,
           t."decimalLongitude"::double precision AS lon, t."decimalLatitude"::double precision AS lat,
           ST_SetSRID(ST_MakePoint(t."decimalLongitude"::double precision,
                                   t."decimalLatitude"::double precision), 4326)::geography AS geog
    FROM incoming_quality_terms AS t
    JOIN {occurrences} AS o ON o.id = t.key::bigint
) AS r
