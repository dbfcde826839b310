-- Upsert one day's batch by gbifID. A row whose values are unchanged is not rewritten (its xmin stays),
-- so a corrected batch touches exactly the corrected rows.
INSERT INTO {occurrence_feed} AS feed (id, species_slug, year, longitude, latitude, license, geom, batch_date)
SELECT id,
       species_slug,
       year,
       longitude,
       latitude,
       license,
       CASE WHEN longitude IS NULL THEN NULL
            ELSE ST_SetSRID(ST_MakePoint(longitude, latitude), 4326) END,
       %(batch_date)s
FROM incoming_batch
ORDER BY id
ON CONFLICT (id) DO UPDATE
SET species_slug = EXCLUDED.species_slug,
    year = EXCLUDED.year,
    longitude = EXCLUDED.longitude,
    latitude = EXCLUDED.latitude,
    license = EXCLUDED.license,
    geom = EXCLUDED.geom,
    batch_date = EXCLUDED.batch_date
WHERE (feed.species_slug, feed.year, feed.longitude, feed.latitude, feed.license, feed.batch_date)
      IS DISTINCT FROM
      (EXCLUDED.species_slug, EXCLUDED.year, EXCLUDED.longitude, EXCLUDED.latitude, EXCLUDED.license,
       EXCLUDED.batch_date)
