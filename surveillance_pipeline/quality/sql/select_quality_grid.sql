-- One species' published points counted on a grid of %(grid)s degrees (cell centres), apart by whether
-- an enabled test flagged the record: the map occurrence_quality shows.
SELECT first_flag IS NOT NULL                     AS flagged,
       round(decimal_longitude / %(grid)s) * %(grid)s AS cell_longitude,
       round(decimal_latitude / %(grid)s) * %(grid)s  AS cell_latitude,
       count(*)                                   AS records
FROM {table}
WHERE species_id = %(species_id)s AND decimal_longitude IS NOT NULL AND decimal_latitude IS NOT NULL
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
