-- What a partition of {table} holds: its rows' count and an order-independent digest of their content,
-- the sum of the first 64 bits of each row's md5 (over the row's text, every column). {where} picks the
-- partition's rows (the partition column equal to a bound value, or TRUE for a target kept whole).
SELECT count(*),
       coalesce(sum(('x' || substr(md5(t::text), 1, 16))::bit(64)::bigint), 0)::text
FROM {table} AS t
WHERE {where}
