-- What a delta from the kept lines will find (core/record_delta.py), counted before any row is made: each
-- candidate ({candidates}: its line changed, came or went) is a record added, changed or removed by
-- whether the partition ({partition}) holds it and whether it has a new line the config keeps (the WHERE
-- of insert_species_occurrences.sql, the same here). A changed line is a changed row: a row holds its
-- line's values (and the point made from them), nothing else.
WITH following AS (
    SELECT id
    FROM incoming_occurrences
    WHERE (license IS NULL OR license = ANY(%(licenses)s))
      AND (NOT %(require_coordinates)s OR longitude IS NOT NULL)
)
SELECT count(*) FILTER (WHERE f.id IS NOT NULL AND h.id IS NULL),
       count(*) FILTER (WHERE f.id IS NOT NULL AND h.id IS NOT NULL),
       count(*) FILTER (WHERE f.id IS NULL AND h.id IS NOT NULL)
FROM {candidates} AS c
LEFT JOIN following AS f ON f.id = c.id
LEFT JOIN {partition} AS h ON h.id = c.id
