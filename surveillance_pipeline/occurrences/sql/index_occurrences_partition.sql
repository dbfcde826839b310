-- The parent's indexes, built once over the loaded rows; ATTACH adopts them instead of building its own.
ALTER TABLE {fresh} ADD PRIMARY KEY (id, species_id);
CREATE INDEX ON {fresh} USING gist (geom);
