-- A delta's second half: the added and changed rows as a full reload writes them, with their rows'
-- hashes (the fingerprint gains them).
WITH came AS (
    INSERT INTO {held} AS held
    SELECT next.*
    FROM {next} AS next
    JOIN record_changes AS change ON change.id = next.id
    WHERE NOT change.removed
    ORDER BY next.id
    RETURNING hashtextextended(held::text, 0) AS row_hash
)
SELECT count(*), coalesce(sum(row_hash), 0)::text FROM came
