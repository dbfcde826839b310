-- The sample's records its export's policy keeps, with each record's fields, in id order (the order the
-- export names).
SELECT sample.id,
       species.slug AS species,
       sample.pick,
       occurrences.year,
       occurrences.longitude,
       occurrences.latitude,
       occurrences.license
FROM occurrence_sample AS sample
-- On species_id too: occurrences is partitioned by it, and its primary key is (id, species_id).
JOIN occurrences ON occurrences.species_id = sample.species_id AND occurrences.id = sample.id
JOIN species ON species.species_id = sample.species_id
WHERE {kept}
ORDER BY sample.id
