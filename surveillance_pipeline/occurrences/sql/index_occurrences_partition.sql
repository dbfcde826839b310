-- The parent's indexes, built once over the loaded rows; ATTACH adopts them instead of building its own.
ALTER TABLE {fresh} ADD PRIMARY KEY (id, species_id);
CREATE INDEX ON {fresh} USING gist (geom);
-- Statistics now, not when autovacuum gets to it: the assets downstream read this partition in the same
-- run, and a table never analyzed is planned as 2,500 rows. Paged by id, masked_release then sorted all
-- the rows after each page's first id, once per page (5M rows: 8x the time of 1M).
ANALYZE {fresh};
