-- Whether the table's planner statistics are stale by autovacuum's own rule (more rows changed since its
-- last analyze than autovacuum_analyze_threshold + autovacuum_analyze_scale_factor × the rows it counted
-- then), or it was never analyzed. Per-table storage parameters that change the rule are not read.
SELECT c.reltuples < 0
    OR s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8
        + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)
FROM pg_class AS c
JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = to_regclass(quote_ident(%(table)s))
