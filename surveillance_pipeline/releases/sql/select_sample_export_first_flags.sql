-- Per test, the sampled records it was the first reason to flag: what the export's policy left out.
SELECT quality.first_flag, count(*)
FROM occurrence_sample AS sample
JOIN {quality} AS quality ON quality.species_id = sample.species_id AND quality.id = sample.id
WHERE quality.first_flag IS NOT NULL
GROUP BY quality.first_flag
ORDER BY quality.first_flag
