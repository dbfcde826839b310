-- The four statement-level triggers that note an edit of {table} made outside a refresh transaction
-- (note_target_edit, migration 8). {target} and {partition_column} are literals: the target's name and
-- the column naming a row's partition ('' for a target kept whole).
CREATE OR REPLACE TRIGGER surveillance_watch_insert AFTER INSERT ON {table}
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION note_target_edit({target}, {partition_column});
CREATE OR REPLACE TRIGGER surveillance_watch_update AFTER UPDATE ON {table}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION note_target_edit({target}, {partition_column});
CREATE OR REPLACE TRIGGER surveillance_watch_delete AFTER DELETE ON {table}
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION note_target_edit({target}, {partition_column});
CREATE OR REPLACE TRIGGER surveillance_watch_truncate AFTER TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION note_target_edit({target}, {partition_column});
ALTER TABLE {table} ENABLE TRIGGER surveillance_watch_insert;
ALTER TABLE {table} ENABLE TRIGGER surveillance_watch_update;
ALTER TABLE {table} ENABLE TRIGGER surveillance_watch_delete;
ALTER TABLE {table} ENABLE TRIGGER surveillance_watch_truncate;
