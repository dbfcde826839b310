-- Whether the table's planner statistics are stale by autovacuum's own rule (more rows changed since its
-- last analyze than autovacuum_analyze_threshold + autovacuum_analyze_scale_factor × the rows it counted
-- then), or it was never analyzed: no row count yet, or rows on disk and no statistics of a column. The
-- second case is a table loaded (and vacuumed: autovacuum vacuums after many inserts, which counts the
-- rows but keeps no statistics), then its change counts lost before autovacuum analyzed it (they reset
-- after a crash or an immediate shutdown, and a database copied from a template starts without them):
-- autovacuum's rule then sees nothing changed, and would not analyze it until as many rows changed again.
-- Per-table storage parameters that change the rule are not read.
SELECT c.reltuples < 0
    OR s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8
        + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)
    OR pg_relation_size(c.oid) > 0 AND NOT EXISTS (
        SELECT 1 FROM pg_stats AS p WHERE p.schemaname = n.nspname AND p.tablename = c.relname
    )
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = to_regclass(quote_ident(%(table)s))
