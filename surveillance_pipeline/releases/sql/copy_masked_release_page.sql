-- One page of a species' occurrences with their true coordinates, in id order (the order the draws are
-- made in): at most %(rows)s rows after id %(after)s. Read page by page, a release of millions of rows
-- never holds them all; COPY binds values client-side, so the planner reads only the species' partition,
-- along its primary key. {columns} are identifiers, bound by the driver.
COPY (
    SELECT {columns}
    FROM occurrences
    WHERE species_id = %(species_id)s AND id > %(after)s
    ORDER BY id
    LIMIT %(rows)s
) TO STDOUT (FORMAT csv)
