-- One species' points counted on a grid of %(grid)s degrees (cell centres), for the map the UI shows.
-- One grouped scan of the species' partition: the map's size follows the species' extent, not its rows.
SELECT round(longitude / %(grid)s) * %(grid)s AS cell_longitude,
       round(latitude / %(grid)s) * %(grid)s  AS cell_latitude,
       count(*)                               AS records
FROM occurrences
WHERE species_id = %(species_id)s AND geom IS NOT NULL
GROUP BY 1, 2
ORDER BY 1, 2
