-- The records that differ between a partition ({held} where {where}) and the rows a full reload would
-- write ({next}, the same columns in the same order): added (no such gbifID held), removed (no longer in
-- the input) or changed (same gbifID, another row). Rows are compared by their text, every column, as
-- the fingerprint reads them.
CREATE TEMPORARY TABLE record_changes ON COMMIT DROP AS
SELECT coalesce(next.id, held.id) AS id,
       held.id IS NULL AS added,
       next.id IS NULL AS removed
FROM {next} AS next
FULL JOIN (SELECT * FROM {held} AS held WHERE {where}) AS held ON held.id = next.id
WHERE held.id IS NULL
   OR next.id IS NULL
   OR next::text IS DISTINCT FROM held::text
