-- A species' records, how many any enabled test flagged, then per test ({flags}: one count per flag
-- column, in the tests' order) how many it flagged, and ({firsts}: one count per test, in that order) how
-- many it was the first reason to flag: one scan of the species' rows.
SELECT count(*) AS records,
       count(*) FILTER (WHERE first_flag IS NOT NULL) AS flagged,
       {flags},
       {firsts}
FROM {table}
WHERE species_id = %(species_id)s
