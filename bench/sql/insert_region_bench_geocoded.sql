-- The bench records without coordinates that the geocoder answered, as geocoded_localities holds them.
INSERT INTO {geocoded} (id, species_id, status, longitude, latitude, geom)
SELECT id, %(species_id)s, geocoded_status, ST_X(geocoded_geom), ST_Y(geocoded_geom), geocoded_geom
FROM {table}
WHERE geocoded_status IS NOT NULL
ORDER BY id
