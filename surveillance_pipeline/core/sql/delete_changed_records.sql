-- A delta's first half: the partition's rows that are removed or changed, with their rows' hashes (the
-- fingerprint loses them).
WITH gone AS (
    DELETE FROM {held} AS held
    USING record_changes AS change
    WHERE held.id = change.id AND NOT change.added AND {where}
    RETURNING hashtextextended(held::text, 0) AS row_hash
)
SELECT count(*), coalesce(sum(row_hash), 0)::text FROM gone
