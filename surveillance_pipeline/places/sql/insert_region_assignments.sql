INSERT INTO {table} (id, species_id, point_source, geom, region_id, method, distance_m)
SELECT id, %(species_id)s, point_source, geom, region_id, method, distance_m
FROM ({assignments}) AS assigned
ORDER BY id
