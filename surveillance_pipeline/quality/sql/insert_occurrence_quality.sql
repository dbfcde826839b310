-- One species' quality rows into {table}: the terms of its records (incoming_quality_terms) for the
-- records its occurrences partition ({occurrences}) holds, one flag per test, and the first reason.
-- A flag is null where its test is off (its on_ parameter false) or the record lacks what the test reads.
-- The spatial tests run once per distinct point (and countryCode): its grid cell first (covered whole by
-- land, or by its own country; within reach of a reference point), then, for a point its cell leaves, its
-- sub-cell (covered by one piece of land or of its country; out of reach of land, or of every country),
-- then its touch cell (touched by land, or by its country: within the buffer; untouched: not on land, or
-- not in its country),
-- then the layers' pieces through their GiST indexes; distances are geodesic metres on the WGS84
-- spheroid (geography). The outliers test is
-- decided per site beforehand (quality/outliers.py) and read from incoming_outliers. With
-- reuse_held (a delta, flags.py), a point the species' rows in {held} already carry keeps their spatial
-- flags, and only new points meet the layers; {records_made} then keeps the records whose row may differ
-- (create_quality_candidates.sql), else it is TRUE; {held_records_made} keeps those whose terms come from
-- their held rows, else it is FALSE.
INSERT INTO {table} (
    id, species_id, basis_of_record, occurrence_status, establishment_means, individual_count, event_date,
    country_code, dataset_key, institution_code, coordinate_uncertainty_m, coordinate_precision, issues,
    decimal_longitude, decimal_latitude,
    flag_gbif_issues, flag_basis, flag_uncertainty, flag_precision, flag_old, flag_zero, flag_equal,
    flag_capitals, flag_centroids, flag_gbif_hq, flag_sea, flag_urban, flag_country, flag_duplicates,
    flag_outliers, first_flag
)
WITH records AS (
    -- A term added here must be compared in create_quality_candidates.sql and
    -- create_quality_candidates_of_lines.sql too (and read from the held rows in the branch below): a
    -- delta makes the rows of the records those files find may differ, and no other.
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
           -- GBIF's issue flags, trimmed, each once, in order. No flag or one (two records in three of the
           -- bench's download) without the subquery, which costs a record some 2 microseconds.
           CASE WHEN t.issues IS NULL OR t.issues = '' THEN '{{}}'::text[]
                WHEN strpos(t.issues, ';') = 0 AND btrim(t.issues) <> '' THEN ARRAY[btrim(t.issues)]
                ELSE ARRAY(
                    SELECT DISTINCT btrim(issue) COLLATE "C"
                    FROM unnest(string_to_array(t.issues, ';')) AS issue
                    WHERE btrim(issue) <> ''
                    ORDER BY 1
                )
           END AS issues,
           t."decimalLongitude"::double precision AS lon,
           t."decimalLatitude"::double precision AS lat
    FROM incoming_quality_terms AS t
    JOIN {occurrences} AS o ON o.id = t.key::bigint
    WHERE {records_made}
    UNION ALL
    -- terms_from_held (a delta that copied in only the changed lines, core/line_digests.py): a candidate
    -- whose line did not change has the terms of its held row, made from that same line.
    SELECT h.id, o.year, h.basis_of_record, h.occurrence_status, h.establishment_means, h.individual_count,
           h.event_date, h.country_code, h.dataset_key, h.institution_code, h.coordinate_uncertainty_m,
           h.coordinate_precision, h.issues, h.decimal_longitude, h.decimal_latitude
    FROM {held} AS h
    JOIN {occurrences} AS o ON o.id = h.id
    WHERE {held_records_made} AND h.species_id = %(species_id)s
      AND NOT EXISTS (SELECT 1 FROM incoming_quality_terms AS t WHERE t.key::bigint = h.id)
      AND NOT EXISTS (SELECT 1 FROM incoming_gone_records AS g WHERE g.id = h.id)
),
known AS (
    -- The spatial flags of the points the species' held rows carry. Reused only when the key's config,
    -- the layers' key and the species' habitat are those the held rows were made under (only the records
    -- changed): the spatial tests read nothing else, so the same point and countryCode get the same flags.
    -- Every row at a point carries the same flags; bool_or picks that value (null where the test is off).
    SELECT decimal_longitude AS lon,
           decimal_latitude AS lat,
           country_code,
           bool_or(flag_capitals) AS capitals,
           bool_or(flag_centroids) AS centroids,
           bool_or(flag_gbif_hq) AS gbif_hq,
           bool_or(flag_sea) AS sea,
           bool_or(flag_urban) AS urban,
           bool_or(flag_country) AS country
    FROM {held}
    WHERE %(reuse_held)s AND species_id = %(species_id)s AND decimal_longitude IS NOT NULL
      AND (decimal_longitude, decimal_latitude) IN (SELECT lon, lat FROM records)
    GROUP BY decimal_longitude, decimal_latitude, country_code
),
located AS (
    SELECT lon, lat, country_code,
           floor(lon / %(cell)s)::integer AS cell_x,
           floor(lat / %(cell)s)::integer AS cell_y
    FROM (SELECT DISTINCT lon, lat, country_code FROM records WHERE lon IS NOT NULL) AS points
    WHERE NOT EXISTS (
        SELECT 1 FROM known AS k
        WHERE k.lon = points.lon AND k.lat = points.lat
          AND k.country_code IS NOT DISTINCT FROM points.country_code
    )
),
country_codes AS (
    SELECT DISTINCT code FROM {references} WHERE layer = 'countries' AND code IS NOT NULL
),
near_cells AS (
    -- The cells a point must lie in to be within a radius test's reach of a reference point: a degree of
    -- latitude is at least 110,000 m, of longitude at least 111,000 m x the cosine of the farthest latitude.
    -- (A reference point within its radius of the antimeridian would miss the far side's cells: none of
    -- Natural Earth's capitals or centroids is.)
    SELECT DISTINCT near.test, x AS cell_x, y AS cell_y
    FROM (
        SELECT CASE WHEN r.layer = 'capitals' THEN 'capitals' ELSE 'centroids' END AS test,
               ST_X(r.geom) AS lon,
               ST_Y(r.geom) AS lat,
               CASE WHEN r.layer = 'capitals' THEN %(capitals_radius_m)s ELSE %(centroids_radius_m)s END
                   AS radius
        FROM {references} AS r
        WHERE r.layer IN ('capitals', 'country_centroids', 'province_centroids')
        UNION ALL
        SELECT 'gbif_hq', %(hq_longitude)s, %(hq_latitude)s, %(gbif_hq_radius_m)s
    ) AS near
    CROSS JOIN LATERAL (SELECT near.radius / 110000.0 AS dy) AS reach_y
    CROSS JOIN LATERAL (
        SELECT reach_y.dy / greatest(cos(radians(least(89.0, abs(near.lat) + reach_y.dy))), 0.01) * 110000.0
               / 111000.0 AS dx
    ) AS reach_x
    CROSS JOIN LATERAL generate_series(floor((near.lon - reach_x.dx) / %(cell)s)::integer,
                                       floor((near.lon + reach_x.dx) / %(cell)s)::integer) AS x
    CROSS JOIN LATERAL generate_series(floor((near.lat - reach_y.dy) / %(cell)s)::integer,
                                       floor((near.lat + reach_y.dy) / %(cell)s)::integer) AS y
),
celled_points AS (
    -- Each point's cell: covered whole by land, or by its own country (an index probe each); within reach
    -- of a reference point (a hash of the few such cells). Most points are settled here; the others go
    -- to their sub-cells (sub_cells), and only what those leave meets a polygon or a distance.
    SELECT l.*,
           floor(l.lon / %(sub_cell)s)::integer AS sub_x,
           floor(l.lat / %(sub_cell)s)::integer AS sub_y,
           EXISTS (
               SELECT 1 FROM {references} AS cell
               WHERE cell.layer = 'land_cells' AND cell.cell_x = l.cell_x AND cell.cell_y = l.cell_y
           ) AS land_cell,
           EXISTS (
               SELECT 1 FROM {references} AS cell
               WHERE cell.layer = 'country_cells' AND cell.cell_x = l.cell_x AND cell.cell_y = l.cell_y
                 AND cell.code = l.country_code
           ) AS own_country_cell,
           codes.code IS NOT NULL AS country_has_polygon,
           capital.cell_x IS NOT NULL AS near_capital,
           centroid.cell_x IS NOT NULL AS near_centroid,
           gbif.cell_x IS NOT NULL AS near_gbif
    FROM located AS l
    LEFT JOIN country_codes AS codes ON codes.code = l.country_code
    LEFT JOIN near_cells AS capital
           ON capital.test = 'capitals' AND capital.cell_x = l.cell_x AND capital.cell_y = l.cell_y
    LEFT JOIN near_cells AS centroid
           ON centroid.test = 'centroids' AND centroid.cell_x = l.cell_x AND centroid.cell_y = l.cell_y
    LEFT JOIN near_cells AS gbif
           ON gbif.test = 'gbif_hq' AND gbif.cell_x = l.cell_x AND gbif.cell_y = l.cell_y
),
sub_cells AS (
    -- The points the cells leave (not in a cell covered by land) fall in sub-cells of a sixteenth of a
    -- degree (exact in binary, as half a degree is: a point's sub-cell contains it), tested once each for
    -- all their points: covered by one piece of land; out of the sea test's reach of land, or of the
    -- country test's reach of every country. The reach in degrees is the one below (reach) taken at the
    -- sub-cell's poleward edge, no less than any of its points' own; where that reach may cross the
    -- antimeridian or near a pole, nothing is settled here.
    SELECT c.sub_x,
           c.sub_y,
           EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer = 'land' AND ST_Covers(r.geom, c.envelope)
           ) AS land_covered,
           reach.sea_bounded AND NOT EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer = 'land' AND ST_DWithin(r.geom, c.envelope, reach.sea_degrees)
           ) AS far_from_land,
           reach.country_bounded AND NOT EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer = 'countries' AND ST_DWithin(r.geom, c.envelope, reach.country_degrees)
           ) AS far_from_countries
    FROM (
        SELECT sub_x, sub_y,
               ST_MakeEnvelope(sub_x * %(sub_cell)s, sub_y * %(sub_cell)s, (sub_x + 1) * %(sub_cell)s,
                               (sub_y + 1) * %(sub_cell)s, 4326) AS envelope,
               greatest(abs(sub_y * %(sub_cell)s), abs((sub_y + 1) * %(sub_cell)s)) AS edge_lat,
               greatest(abs(sub_x * %(sub_cell)s), abs((sub_x + 1) * %(sub_cell)s)) AS edge_lon
        FROM (SELECT DISTINCT sub_x, sub_y FROM celled_points WHERE NOT land_cell) AS distinct_sub_cells
    ) AS c
    CROSS JOIN LATERAL (
        SELECT (%(sea_reach_m)s / 110574.0)
                   / cos(radians(least(89.0, c.edge_lat + %(sea_reach_m)s / 110574.0))) AS sea_degrees,
               (%(country_reach_m)s / 110574.0)
                   / cos(radians(least(89.0, c.edge_lat + %(country_reach_m)s / 110574.0))) AS country_degrees
    ) AS degrees
    CROSS JOIN LATERAL (
        SELECT degrees.sea_degrees,
               degrees.country_degrees,
               c.edge_lat + %(sea_reach_m)s / 110574.0 < 89.0
                   AND c.edge_lon + degrees.sea_degrees < 180.0 AS sea_bounded,
               c.edge_lat + %(country_reach_m)s / 110574.0 < 89.0
                   AND c.edge_lon + degrees.country_degrees < 180.0 AS country_bounded
    ) AS reach
    WHERE %(on_sea)s OR %(on_country)s
),
sub_cell_countries AS (
    -- Whether one piece of a point's own country covers its sub-cell, for the points their cell leaves.
    SELECT c.sub_x,
           c.sub_y,
           c.country_code,
           EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer = 'countries' AND r.code = c.country_code
                 AND ST_Covers(r.geom, ST_MakeEnvelope(c.sub_x * %(sub_cell)s, c.sub_y * %(sub_cell)s,
                                                       (c.sub_x + 1) * %(sub_cell)s,
                                                       (c.sub_y + 1) * %(sub_cell)s, 4326))
           ) AS own_covered
    FROM (
        SELECT DISTINCT sub_x, sub_y, country_code
        FROM celled_points
        WHERE NOT own_country_cell AND country_code IS NOT NULL
    ) AS c
    WHERE %(on_country)s
),
celled AS (
    SELECT p.*,
           p.land_cell OR coalesce(sub.land_covered, false) AS on_land,
           p.own_country_cell OR coalesce(own.own_covered, false) AS in_own_country,
           coalesce(sub.far_from_land, false) AS far_from_land,
           coalesce(sub.far_from_countries, false) AS far_from_countries
    FROM celled_points AS p
    LEFT JOIN sub_cells AS sub ON sub.sub_x = p.sub_x AND sub.sub_y = p.sub_y
    LEFT JOIN sub_cell_countries AS own
           ON own.sub_x = p.sub_x AND own.sub_y = p.sub_y AND own.country_code = p.country_code
),
land_touch AS (
    -- The points their cells and sub-cells leave to the sea test fall in touch cells (sea_touch_cell, a
    -- power of two whose diagonal is within the test's sure bound in degrees, flags.touch_cell): a cell
    -- touched by a piece of land has every point within that bound of it (of the piece's point in the
    -- cell, each is at most a diagonal away), so within the buffer; no point of an untouched cell is on
    -- land. One test per cell for all its points: the pieces' polygons are then met only by the points
    -- out at sea. (A buffer no cell fits, under some 50 m, settles nothing here: sea_touch_settles.)
    SELECT t.touch_x,
           t.touch_y,
           EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer = 'land'
                 AND ST_Intersects(r.geom, ST_MakeEnvelope(t.touch_x * %(sea_touch_cell)s,
                                                           t.touch_y * %(sea_touch_cell)s,
                                                           (t.touch_x + 1) * %(sea_touch_cell)s,
                                                           (t.touch_y + 1) * %(sea_touch_cell)s, 4326))
           ) AS touched
    FROM (
        SELECT DISTINCT floor(lon / %(sea_touch_cell)s)::integer AS touch_x,
                        floor(lat / %(sea_touch_cell)s)::integer AS touch_y
        FROM celled
        WHERE NOT on_land AND NOT far_from_land
    ) AS t
    WHERE %(on_sea)s OR %(on_country)s
),
country_touch AS (
    -- The same for the country test: a touch cell (country_touch_cell) that a piece of the point's own
    -- country touches is within its buffer; a point in an untouched one is not in its country.
    SELECT t.touch_x,
           t.touch_y,
           t.country_code,
           EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer = 'countries' AND r.code = t.country_code
                 AND ST_Intersects(r.geom, ST_MakeEnvelope(t.touch_x * %(country_touch_cell)s,
                                                           t.touch_y * %(country_touch_cell)s,
                                                           (t.touch_x + 1) * %(country_touch_cell)s,
                                                           (t.touch_y + 1) * %(country_touch_cell)s, 4326))
           ) AS touched
    FROM (
        SELECT DISTINCT floor(lon / %(country_touch_cell)s)::integer AS touch_x,
                        floor(lat / %(country_touch_cell)s)::integer AS touch_y,
                        country_code
        FROM celled
        WHERE NOT in_own_country AND NOT far_from_countries AND country_has_polygon
    ) AS t
    WHERE %(on_country)s
),
touched AS (
    SELECT c.*, land.touched AS land_touched, own.touched AS country_touched
    FROM celled AS c
    LEFT JOIN land_touch AS land
           ON land.touch_x = floor(c.lon / %(sea_touch_cell)s)::integer
          AND land.touch_y = floor(c.lat / %(sea_touch_cell)s)::integer
    LEFT JOIN country_touch AS own
           ON own.touch_x = floor(c.lon / %(country_touch_cell)s)::integer
          AND own.touch_y = floor(c.lat / %(country_touch_cell)s)::integer
          AND own.country_code = c.country_code
),
spatial AS (
    -- A point's geometry (and geography) is made in each probe that reads it, not carried through the
    -- CTEs above, which copy every point several times: most points meet no probe (for the largest
    -- species of the bench's 1M download, 5.6-6.0 s against 5.9-6.2 s, four alternating runs each,
    -- 2026-12-07; absolute times move with the machine).
    SELECT p.lon,
           p.lat,
           p.country_code,
           CASE WHEN %(on_capitals)s THEN p.near_capital AND EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer = 'capitals' AND ST_DWithin(
                   r.geog,
                   ST_SetSRID(ST_MakePoint(p.lon, p.lat), 4326)::geography,
                   %(capitals_radius_m)s
               )
           ) END AS capitals,
           CASE WHEN %(on_centroids)s THEN p.near_centroid AND EXISTS (
               SELECT 1 FROM {references} AS r
               WHERE r.layer IN ('country_centroids', 'province_centroids')
                 AND ST_DWithin(
                     r.geog,
                     ST_SetSRID(ST_MakePoint(p.lon, p.lat), 4326)::geography,
                     %(centroids_radius_m)s
                 )
           ) END AS centroids,
           CASE WHEN %(on_gbif_hq)s THEN p.near_gbif AND ST_DWithin(
               ST_SetSRID(ST_MakePoint(%(hq_longitude)s, %(hq_latitude)s), 4326)::geography,
               ST_SetSRID(ST_MakePoint(p.lon, p.lat), 4326)::geography,
               %(gbif_hq_radius_m)s
           ) END AS gbif_hq,
           CASE WHEN %(on_sea)s AND %(terrestrial)s THEN NOT p.near_land END AS sea,
           CASE WHEN %(on_urban)s THEN EXISTS (
               SELECT 1 FROM {references} AS r WHERE r.layer = 'urban' AND ST_Intersects(
                   r.geom,
                   ST_SetSRID(ST_MakePoint(p.lon, p.lat), 4326)
               )
           ) END AS urban,
           -- Not evaluated for a record without countryCode, with one the layer has no polygon for, or at
           -- sea for a species that lives in water (a country's waters are not in its land polygon).
           CASE WHEN %(on_country)s AND (%(terrestrial)s OR p.near_land) AND p.country_has_polygon THEN NOT (
               p.in_own_country
               OR %(country_touch_settles)s AND coalesce(p.country_touched, false)
               OR NOT p.far_from_countries AND (
                   p.country_touched IS DISTINCT FROM false AND EXISTS (
                       SELECT 1 FROM {references} AS r
                       WHERE r.layer = 'countries' AND r.code = p.country_code
                         AND ST_Intersects(r.geom, ST_SetSRID(ST_MakePoint(p.lon, p.lat), 4326))
                   )
                   OR (
                       (NOT p.country_reach_bounded OR EXISTS (
                           SELECT 1 FROM {references} AS r
                           WHERE r.layer = 'countries' AND r.code = p.country_code
                             AND ST_DWithin(
                                 r.geom,
                                 ST_SetSRID(ST_MakePoint(p.lon, p.lat), 4326),
                                 p.country_reach_degrees
                             )
                       ))
                       AND (
                           EXISTS (
                               SELECT 1 FROM {references} AS r
                               WHERE r.layer = 'countries' AND r.code = p.country_code
                                 AND ST_DWithin(
                                     r.geom,
                                     ST_SetSRID(ST_MakePoint(p.lon, p.lat), 4326),
                                     %(country_sure_degrees)s
                                 )
                           )
                           OR EXISTS (
                               SELECT 1 FROM {references} AS r
                               WHERE r.layer = 'countries' AND r.code = p.country_code
                                 AND ST_DWithin(
                                     r.geog,
                                     ST_SetSRID(ST_MakePoint(p.lon, p.lat), 4326)::geography,
                                     %(country_buffer_m)s
                                 )
                           )
                       )
                   )
               )
           ) END AS country
    FROM (
        SELECT c.*,
               -- On land, or within the sea test's buffer of it: the cell settles most points, then the
               -- pieces; then the bounds in degrees (reach below), and the geodesic distance only for a
               -- point the bounds leave undecided.
               CASE WHEN %(on_sea)s OR %(on_country)s THEN (
                   c.on_land
                   OR %(sea_touch_settles)s AND coalesce(c.land_touched, false)
                   OR NOT c.far_from_land AND (
                       c.land_touched IS DISTINCT FROM false AND EXISTS (
                           SELECT 1 FROM {references} AS r
                           WHERE r.layer = 'land' AND ST_Intersects(
                               r.geom,
                               ST_SetSRID(ST_MakePoint(c.lon, c.lat), 4326)
                           )
                       )
                       OR (
                           (NOT reach.sea_reach_bounded OR EXISTS (
                               SELECT 1 FROM {references} AS r
                               WHERE r.layer = 'land' AND ST_DWithin(
                                   r.geom,
                                   ST_SetSRID(ST_MakePoint(c.lon, c.lat), 4326),
                                   reach.sea_reach_degrees
                               )
                           ))
                           AND (
                               EXISTS (
                                   SELECT 1 FROM {references} AS r
                                   WHERE r.layer = 'land' AND ST_DWithin(
                                       r.geom,
                                       ST_SetSRID(ST_MakePoint(c.lon, c.lat), 4326),
                                       %(sea_sure_degrees)s
                                   )
                               )
                               OR EXISTS (
                                   SELECT 1 FROM {references} AS r
                                   WHERE r.layer = 'land' AND ST_DWithin(
                                       r.geog,
                                       ST_SetSRID(ST_MakePoint(c.lon, c.lat), 4326)::geography,
                                       %(sea_buffer_m)s
                                   )
                               )
                           )
                       )
                   )
               ) END AS near_land,
               reach.country_reach_degrees,
               reach.country_reach_bounded
        FROM touched AS c
        -- Bounds in plain degrees that settle most points before a geodesic distance (about 4x the cost
        -- of a planar test). Along any path in longitude-latitude, a metre of the WGS84 spheroid is at
        -- most 1/111,694 of a degree (the meridian's degree at the pole is the longest, 111,694 m) and at
        -- least 1/(110,574 cos(phi)) (the meridian's degree at the equator, 110,574 m, the parallel's
        -- shorter by cos(phi), phi the farthest latitude the path reaches). So:
        --   sure:  a piece within (buffer - slack) / 111,694 degrees is within the buffer;
        --   reach: a piece within the buffer is within (buffer + slack) / (110,574 cos(phi)) degrees,
        --          unless the path may cross the antimeridian or come near a pole (not bounded then).
        -- The slack (a hundredth of the buffer, plus 10 m) covers how far a piece's geodesic edges
        -- stray from its planar ones (under 2 m at 0.1 degree, insert_quality_references.sql) and
        -- PostGIS's rounding; a point between the two bounds is measured as before, so every flag is the
        -- geodesic test's.
        CROSS JOIN LATERAL (
            SELECT (%(sea_reach_m)s / 110574.0)
                       / cos(radians(least(89.0, abs(c.lat) + %(sea_reach_m)s / 110574.0)))
                       AS sea_reach_degrees,
                   abs(c.lat) + %(sea_reach_m)s / 110574.0 < 89.0
                       AND abs(c.lon) + (%(sea_reach_m)s / 110574.0)
                           / cos(radians(least(89.0, abs(c.lat) + %(sea_reach_m)s / 110574.0))) < 180.0
                       AS sea_reach_bounded,
                   (%(country_reach_m)s / 110574.0)
                       / cos(radians(least(89.0, abs(c.lat) + %(country_reach_m)s / 110574.0)))
                       AS country_reach_degrees,
                   abs(c.lat) + %(country_reach_m)s / 110574.0 < 89.0
                       AND abs(c.lon) + (%(country_reach_m)s / 110574.0)
                           / cos(radians(least(89.0, abs(c.lat) + %(country_reach_m)s / 110574.0))) < 180.0
                       AS country_reach_bounded
        ) AS reach
    ) AS p
),
-- Materialized: the planner, guessing a tenth of the points there are, hashed the records' wide rows
-- and probed them with the points; with the points' flags hashed (narrow) the records stream past them.
-- With the duplicates below, the largest species of the bench's 1M download: 5.06 s against 5.64 s
-- (median of five, alternating, the same md5 over the rows; 2026-12-07, /tmp script).
spatial_flags AS MATERIALIZED (
    SELECT lon, lat, country_code, capitals, centroids, gbif_hq, sea, urban, country FROM spatial
    UNION ALL
    SELECT lon, lat, country_code, capitals, centroids, gbif_hq, sea, urban, country FROM known
),
duplicates AS (
    -- The first record (lowest gbifID) of each dataset at each point stays unflagged: each group's
    -- first gbifID, hashed (a window over the records sorted by dataset and point took 0.5 s of the
    -- largest species' statement). The group's dataset as two hashable keys, so that a record without
    -- one joins the group of its point's others without one, as GROUP BY groups them.
    SELECT dataset_key IS NULL AS no_dataset, coalesce(dataset_key, '') AS dataset, lon, lat,
           min(id) AS first_id
    FROM records
    WHERE lon IS NOT NULL
    GROUP BY dataset_key, lon, lat
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
           CASE WHEN %(on_duplicates)s THEN d.first_id <> r.id END AS flag_duplicates,
           CASE WHEN %(on_outliers)s THEN m.outlier END AS flag_outliers
    FROM records AS r
    LEFT JOIN spatial_flags AS s
           ON s.lon = r.lon AND s.lat = r.lat AND s.country_code IS NOT DISTINCT FROM r.country_code
    LEFT JOIN duplicates AS d
           ON d.no_dataset = (r.dataset_key IS NULL) AND d.dataset = coalesce(r.dataset_key, '')
          AND d.lon = r.lon AND d.lat = r.lat
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
