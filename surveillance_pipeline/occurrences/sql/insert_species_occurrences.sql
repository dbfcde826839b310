-- Rows of one species from the incoming derived file, shaped by the asset's config.
-- Records without a license are kept: the license filter chooses among licensed records.
INSERT INTO {occurrences} (id, species_id, year, longitude, latitude, license, geom)
SELECT id,
       %(species_id)s,
       year,
       longitude,
       latitude,
       license,
       CASE WHEN longitude IS NULL THEN NULL
            ELSE ST_SetSRID(ST_MakePoint(longitude, latitude), 4326) END
FROM incoming_occurrences
WHERE (license IS NULL OR license = ANY(%(licenses)s))
  AND (NOT %(require_coordinates)s OR longitude IS NOT NULL)
ORDER BY id
