-- The masking limit's read: one page of the bench species' rows in id order as CSV lines in one text
-- value (psycopg hands COPY's output over a row at a time, which costs more than the server's work).
SELECT string_agg(page.line, E'\n' ORDER BY page.id), max(page.id), count(*)
FROM (
    SELECT o.id,
           coalesce(o.id::text, '') || ',' || coalesce(o.year::text, '') || ','
           || coalesce(o.longitude::text, '') || ',' || coalesce(o.latitude::text, '') || ','
           || coalesce('"' || replace(o.license, '"', '""') || '"', '') AS line
    FROM occurrences o
    WHERE o.species_id = (SELECT species_id FROM species WHERE slug = %(slug)s) AND o.id > %(after)s
    ORDER BY o.id
    LIMIT %(rows)s
) AS page
