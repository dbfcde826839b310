CREATE TEMPORARY TABLE incoming_delivery (
    id      bigint,
    year    integer,
    license text
) ON COMMIT DROP
