-- This backend's counts of the rows the load inserted reach the shared statistics as the load commits,
-- instead of up to a second later: the ANALYZE that follows the commit (analyze_occurrences_partition)
-- then finds them there and sets them back to zero, and autovacuum has no cause to analyze the partition
-- again. (Counted after it, they read as a partition changed since its last analyze.) PostgreSQL 15+.
SELECT pg_stat_force_next_flush();
