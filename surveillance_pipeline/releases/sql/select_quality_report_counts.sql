-- Per species with quality rows: its records, how many any enabled test flagged, then per test ({flags},
-- in the tests' order) the records it flagged and the records it was the first to flag.
SELECT q.species_id,
       s.slug,
       s.scientific_name,
       count(*),
       count(*) FILTER (WHERE q.first_flag IS NOT NULL),
       {flags}
FROM {table} AS q
JOIN species AS s ON s.species_id = q.species_id
GROUP BY q.species_id, s.slug, s.scientific_name
ORDER BY q.species_id
