NOT EXISTS (
    SELECT 1 FROM {quality} AS q
    WHERE q.species_id = occurrences.species_id AND q.id = occurrences.id AND q.first_flag IS NOT NULL
)
