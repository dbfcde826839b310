-- DuckDB: one species' sample from its derived CSV file, shaped by the rules its partition recorded.
-- ORDER BY ... LIMIT is DuckDB's top-N: it keeps the cap, not the file, so memory does not grow with the
-- species (a window over every file at once held all the ids: 0.7 GB at 5M records).
-- The dialect is stated, not sniffed: gbif_derived writes every file alike (comma, double quotes doubled,
-- a header, an empty field for no value), and sniffing each of 71 files took 1.0 of the 1.3 s this
-- engine spent on a 600,000-record download (0.15 s without).
INSERT INTO picked
SELECT $species_id, csv.id
FROM read_csv(
    $path,
    header = true,
    auto_detect = false,
    delim = ',',
    quote = '"',
    escape = '"',
    columns = {
        'id': 'BIGINT', 'year': 'INTEGER', 'longitude': 'DOUBLE', 'latitude': 'DOUBLE', 'license': 'VARCHAR'
    }
) AS csv
WHERE (csv.license IS NULL OR list_contains(CAST($licenses AS VARCHAR[]), csv.license))
  AND (NOT $require_coordinates OR csv.longitude IS NOT NULL)
  AND csv.id NOT IN (SELECT id FROM excluded WHERE species_id = $species_id)
ORDER BY md5(CAST(csv.id AS VARCHAR)), csv.id
LIMIT $cap
