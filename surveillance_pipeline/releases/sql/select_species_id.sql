-- The species a slug names: its partition of occurrences is read by species_id.
SELECT species_id FROM species WHERE slug = %(slug)s
