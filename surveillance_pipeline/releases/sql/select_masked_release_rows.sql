-- One species' occurrences with their true coordinates, in id order: the order the draws are made in.
SELECT occurrences.id,
       species.slug AS species,
       occurrences.year,
       occurrences.longitude,
       occurrences.latitude,
       occurrences.license
FROM occurrences
JOIN species ON species.species_id = occurrences.species_id
WHERE species.slug = %(slug)s
ORDER BY occurrences.id
