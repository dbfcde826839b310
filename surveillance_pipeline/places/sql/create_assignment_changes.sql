-- The records of a species whose assignment may differ from the one {held} keeps for it: a region
-- depends on the point alone (the layer the same), so these are the records whose point (their own, else
-- their geocoded one) differs from the point kept with their assignment, the records with a point that
-- have none kept, and the kept ones whose record is gone or has no point any more. Each such record's
-- row is added, removed or changed (every point gets a row, and the point is part of the row), so
-- `change` counts what the delta will find before any point is assigned.
CREATE TEMPORARY TABLE assignment_changes ON COMMIT DROP AS
SELECT coalesce(now.id, held.id) AS id,
       CASE WHEN held.id IS NULL THEN 'added' WHEN now.id IS NULL THEN 'removed' ELSE 'changed' END AS change
FROM (
    SELECT o.id,
           CASE WHEN o.geom IS NOT NULL THEN 'record' ELSE 'geocoded' END AS point_source,
           coalesce(o.geom, g.geom) AS geom
    FROM {occurrences} AS o
    LEFT JOIN {geocoded} AS g ON g.species_id = o.species_id AND g.id = o.id AND g.status = 'found'
    WHERE o.species_id = %(species_id)s
      AND coalesce(o.geom, g.geom) IS NOT NULL
) AS now
FULL JOIN (SELECT id, point_source, geom FROM {held} WHERE species_id = %(species_id)s) AS held
       ON held.id = now.id
WHERE now.id IS NULL
   OR held.id IS NULL
   OR now.point_source <> held.point_source
   OR ST_AsEWKB(now.geom) <> ST_AsEWKB(held.geom)
