-- One species' occurrences with their true coordinates, in id order: the order the draws are made in.
-- As CSV for COPY TO STDOUT, parsed column by column; the slug is the species column, so it is not sent.
-- Floats print shortest-exact (extra_float_digits 1, PostgreSQL's default since 12): they parse back bit for bit.
COPY (
    SELECT occurrences.id,
           occurrences.year,
           occurrences.longitude,
           occurrences.latitude,
           occurrences.license
    FROM occurrences
    JOIN species ON species.species_id = occurrences.species_id
    WHERE species.slug = %(slug)s
    ORDER BY occurrences.id
) TO STDOUT (FORMAT csv)
