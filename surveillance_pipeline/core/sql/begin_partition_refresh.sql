-- The first statement of a partition's refresh transaction, in one round trip (a skip's transaction is a
-- handful of them, 71 partitions per asset and run): tell the watch that this transaction is a refresh,
-- let the transaction commit without waiting for its WAL flush when it is the outermost one (a load
-- turns the wait back on: only a skip's commit may be lost in a server crash, see
-- commit_without_waiting_for_disk), take the partition's lock, say whether every skip is verified, and
-- whether the target's table looks current (read before any schema lock: a hint, checked again under it).
SELECT set_config(%(refreshing)s, 'on', true),
       set_config('synchronous_commit',
                  CASE WHEN %(outermost)s THEN 'off' ELSE current_setting('synchronous_commit') END, true),
       pg_advisory_xact_lock(%(lock)s),
       coalesce(current_setting(%(verify)s, true) = 'on', false),
       ({schema_is_current})
