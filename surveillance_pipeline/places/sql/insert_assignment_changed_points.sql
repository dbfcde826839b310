-- The records assignment_changes names and their geocoded points, into assign_points' tables (one
-- statement: its values are bound parameters).
WITH points AS (
    INSERT INTO assignment_points (id, species_id, geom)
    SELECT o.id, o.species_id, o.geom
    FROM {occurrences} AS o
    JOIN assignment_changes AS c ON c.id = o.id
    WHERE o.species_id = %(species_id)s
    RETURNING 1
)
INSERT INTO assignment_geocoded (id, species_id, status, geom)
SELECT g.id, g.species_id, g.status, g.geom
FROM {geocoded} AS g
JOIN assignment_changes AS c ON c.id = g.id
WHERE g.species_id = %(species_id)s
