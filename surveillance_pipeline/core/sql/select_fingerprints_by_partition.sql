-- select_partition_fingerprint for every partition of {table} in one scan: {partition_ref} is the text
-- naming a row's partition (the partition column as text, or 'all' for a target kept whole).
SELECT {partition_ref},
       count(*),
       coalesce(sum(hashtextextended(t::text, 0)), 0)::text
FROM {table} AS t
GROUP BY 1
