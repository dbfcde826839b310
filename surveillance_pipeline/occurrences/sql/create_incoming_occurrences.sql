-- The derived CSV's columns, COPY'd in before they replace a species' rows.
CREATE TEMPORARY TABLE incoming_occurrences (
    id        bigint,
    year      integer,
    longitude double precision,
    latitude  double precision,
    license   text
) ON COMMIT DROP
