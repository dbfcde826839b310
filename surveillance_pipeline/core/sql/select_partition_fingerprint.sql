-- What a partition of {table} holds: its rows' count and an order-independent digest of their content,
-- the sum of each row's 64-bit hash (hashtextextended over the row's text, every column: the hash
-- PostgreSQL's hash partitioning keeps stable across versions). {where} picks the
-- partition's rows (the partition column equal to a bound value, or TRUE for a target kept whole).
SELECT count(*),
       coalesce(sum(hashtextextended(t::text, 0)), 0)::text
FROM {table} AS t
WHERE {where}
