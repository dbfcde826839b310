-- Whether the target's table is the one built at this schema version, and watched since it was built: the
-- common case, read inside a refresh's own statements. refresh.py's ensure_target_schema tells the other
-- cases apart (never built, an older version, a table dropped or made again, a table from before the watch).
SELECT coalesce(
    (SELECT version = %(schema_version)s AND table_oid = to_regclass(%(target)s)::oid
     FROM target_schema WHERE target = %(target)s),
    false)
