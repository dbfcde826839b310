-- Ids that entered (with their new pick) or left (with their old pick) one species' sample.
INSERT INTO sample_drift (run_id, species_id, id, change, pick)
SELECT %(run_id)s, %(species_id)s, id, change, pick
FROM (
    SELECT new.id, 'entered' AS change, new.pick
    FROM {occurrence_sample} AS new
    WHERE new.species_id = %(species_id)s
      AND new.id NOT IN (SELECT id FROM previous_sample)
    UNION ALL
    SELECT old.id, 'left', old.pick
    FROM previous_sample AS old
    WHERE old.id NOT IN (SELECT id FROM {occurrence_sample} WHERE species_id = %(species_id)s)
) AS drift
ORDER BY change, pick
RETURNING id, change, pick
