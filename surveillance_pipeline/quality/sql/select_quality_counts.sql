-- A species' records, how many any enabled test flagged, then per test ({flags}: one count per flag
-- column, in the tests' order) how many it flagged.
SELECT count(*) AS records,
       count(*) FILTER (WHERE first_flag IS NOT NULL) AS flagged,
       {flags}
FROM {table}
WHERE species_id = %(species_id)s
