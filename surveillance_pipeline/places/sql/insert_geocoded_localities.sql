INSERT INTO {table} (id, species_id, status, longitude, latitude, geom)
SELECT id,
       %(species_id)s,
       status,
       longitude,
       latitude,
       CASE WHEN status = 'found' THEN ST_SetSRID(ST_MakePoint(longitude, latitude), 4326) END
FROM incoming_geocoded
ORDER BY id
