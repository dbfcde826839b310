-- A record a drop_any_flagged policy keeps: no enabled test flagged it. A record the flags do not cover
-- (none made for it) is not flagged, so it is kept.
NOT EXISTS (
    SELECT 1 FROM {quality} AS q
    WHERE q.species_id = {species_id} AND q.id = {record_id} AND q.first_flag IS NOT NULL
)
