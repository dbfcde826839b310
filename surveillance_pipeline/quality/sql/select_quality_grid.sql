-- One species' published points counted on a grid of %(grid)s degrees (cell centres), apart by whether
-- an enabled test flagged the record: the map occurrence_quality shows. Grouped by the cells' whole
-- numbers, multiplied back after: the planner then hashes a few thousand groups, where on the doubles it
-- guessed one per row and sorted every record on disk (247,207 records: 125-135 ms against 240-320 ms,
-- the same rows; 2026-12-07, /tmp script).
SELECT flagged,
       cell_x * %(grid)s AS cell_longitude,
       cell_y * %(grid)s AS cell_latitude,
       records
FROM (
    SELECT first_flag IS NOT NULL                       AS flagged,
           round(decimal_longitude / %(grid)s)::integer AS cell_x,
           round(decimal_latitude / %(grid)s)::integer  AS cell_y,
           count(*)                                     AS records
    FROM {table}
    WHERE species_id = %(species_id)s AND decimal_longitude IS NOT NULL AND decimal_latitude IS NOT NULL
    GROUP BY 1, 2, 3
) AS cells
ORDER BY flagged, cell_x, cell_y
