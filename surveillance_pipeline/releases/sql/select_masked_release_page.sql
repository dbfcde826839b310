-- One page of a species' occurrences with their true coordinates, in id order (the release's order):
-- at most %(rows)s rows after id %(after)s, as CSV lines in one text value. Read page by page,
-- a release of millions of rows never holds them all; one value per page, because psycopg hands COPY's
-- output over a row at a time, which cost more than the rest of the release. {line} joins the page's
-- columns as CSV fields: NULL an empty field, text quoted (an empty text is ""). The last condition
-- on the rows is the release policy's (condition_not_flagged.sql, or TRUE).
SELECT string_agg(page.line, E'\n' ORDER BY page.id)
FROM (
    SELECT id, {line} AS line
    FROM occurrences
    WHERE species_id = %(species_id)s AND id > %(after)s AND {kept}
    ORDER BY id
    LIMIT %(rows)s
) AS page
