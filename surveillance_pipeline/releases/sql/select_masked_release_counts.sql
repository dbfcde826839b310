-- How many rows a species' release holds, and how many hold each value: the GeoParquet's column types
-- (pandas makes an integer column with a null float64) must be known before its first row is written.
SELECT count(*), count(year), count(longitude), count(latitude), count(license)
FROM occurrences
WHERE species_id = %(species_id)s AND {kept}
