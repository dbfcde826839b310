-- Each occurrence of the species with a point: its own, else the point its locality was geocoded to.
INSERT INTO assignment_points (id, point_source, geom)
SELECT o.id,
       CASE WHEN o.geom IS NOT NULL THEN 'record' ELSE 'geocoded' END,
       coalesce(o.geom, g.geom)
FROM {occurrences} AS o
LEFT JOIN {geocoded} AS g ON g.id = o.id AND g.status = 'found'
WHERE o.species_id = %(species_id)s
  AND coalesce(o.geom, g.geom) IS NOT NULL
ORDER BY o.id
