-- Per test, the devil_snapshot rows it was the first reason to flag (the devil's flags in
-- occurrence_quality): what the export's policy left out.
SELECT quality.first_flag, count(*)
FROM devil_snapshot
JOIN {quality} AS quality ON quality.species_id = %(species_id)s AND quality.id = devil_snapshot.id
WHERE quality.first_flag IS NOT NULL
GROUP BY quality.first_flag
ORDER BY quality.first_flag
