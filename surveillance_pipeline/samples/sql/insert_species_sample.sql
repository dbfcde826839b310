-- The first %(cap)s records of one species by md5 of the id text, then id (ties cannot reorder), among
-- those its policy keeps (kept: TRUE, or no enabled quality test flagged the record).
INSERT INTO {occurrence_sample} (species_id, id, pick)
SELECT species_id, id, pick
FROM (
    SELECT species_id,
           id,
           row_number() OVER (ORDER BY md5(CAST(id AS VARCHAR)), id) AS pick
    FROM occurrences
    WHERE species_id = %(species_id)s AND {kept}
) AS ranked
WHERE pick <= %(cap)s
ORDER BY pick
