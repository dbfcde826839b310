-- One species' geocoded records, COPY'd in before they replace its rows.
CREATE TEMPORARY TABLE incoming_geocoded (
    id        bigint,
    status    text,
    longitude double precision,
    latitude  double precision
) ON COMMIT DROP
