-- One row at a time, as the course's executemany loader wrote them.
INSERT INTO {table} (id, species_id, year, longitude, latitude, license, geom)
VALUES (%(id)s, %(species_id)s, %(year)s, %(longitude)s, %(latitude)s, %(license)s,
        ST_SetSRID(ST_MakePoint(%(longitude)s, %(latitude)s), 4326))
