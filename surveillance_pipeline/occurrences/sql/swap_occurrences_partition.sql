-- The fresh table replaces the species' partition. Last in the load's transaction: dropping a partition
-- locks the parent exclusively until COMMIT, so nothing slow may follow it.
DROP TABLE IF EXISTS {partition};
ALTER TABLE {fresh} RENAME TO {partition};
ALTER TABLE {occurrences} ATTACH PARTITION {partition} FOR VALUES IN ({species_id});
