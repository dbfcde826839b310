-- DuckDB: the course's summary line over the picked ids.
SELECT count(*) AS records,
       count(DISTINCT species_id) AS species,
       md5(coalesce(string_agg(CAST(id AS VARCHAR), ',' ORDER BY id), '')) AS ids_md5
FROM picked
