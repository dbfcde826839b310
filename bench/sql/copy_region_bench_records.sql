-- The bench points as a derived CSV (the columns of occurrences/derive.py's DERIVED_COLUMNS), by id.
COPY (
    SELECT id, 2000 AS year, longitude, latitude, 'CC BY 4.0' AS license
    FROM {table}
    ORDER BY id
) TO STDOUT WITH (FORMAT csv, HEADER)
