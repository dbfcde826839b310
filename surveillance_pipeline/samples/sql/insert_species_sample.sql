-- The first %(cap)s records of one species by md5 of the id text, then id (ties cannot reorder), among
-- those its policy keeps (kept: TRUE, or no enabled quality test flagged the record). ORDER BY with LIMIT
-- keeps the first cap rows in a bounded heap as it reads (top-N heapsort); a row_number() over every
-- record sorted all of them, on disk past work_mem: 550 ms against 219 ms for the largest species of the
-- bench's 1M download (247,215 records, EXPLAIN ANALYZE, 2026-12-07).
INSERT INTO {occurrence_sample} (species_id, id, pick)
SELECT species_id, id, row_number() OVER (ORDER BY id_md5, id) AS pick
FROM (
    SELECT species_id, id, md5(CAST(id AS VARCHAR)) AS id_md5
    FROM occurrences
    WHERE species_id = %(species_id)s AND {kept}
    ORDER BY id_md5, id
    LIMIT %(cap)s
) AS first_picks
ORDER BY pick
