-- The records of one species that an enabled quality test flagged (what drop_any_flagged leaves out).
SELECT id FROM {quality} WHERE species_id = %(species_id)s AND first_flag IS NOT NULL ORDER BY id
