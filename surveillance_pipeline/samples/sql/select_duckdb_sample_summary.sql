-- DuckDB: the md5 rule over the derived CSV files, shaped by each species' recorded rules.
WITH derived AS (
    SELECT rules.species_id, csv.id, rules.cap
    FROM read_csv(
        $1,
        header = true,
        filename = true,
        columns = {'id': 'BIGINT', 'year': 'INTEGER', 'longitude': 'DOUBLE', 'latitude': 'DOUBLE', 'license': 'VARCHAR'}
    ) AS csv
    JOIN rules ON rules.path = csv.filename
    WHERE (csv.license IS NULL OR list_contains(rules.licenses, csv.license))
      AND (NOT rules.require_coordinates OR csv.longitude IS NOT NULL)
),
ranked AS (
    SELECT species_id, id, cap,
           row_number() OVER (PARTITION BY species_id ORDER BY md5(CAST(id AS VARCHAR)), id) AS pick
    FROM derived
)
SELECT count(*) AS records,
       count(DISTINCT species_id) AS species,
       md5(coalesce(string_agg(CAST(id AS VARCHAR), ',' ORDER BY id), '')) AS ids_md5
FROM ranked
WHERE pick <= cap
