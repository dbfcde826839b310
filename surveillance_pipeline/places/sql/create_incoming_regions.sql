CREATE TEMPORARY TABLE incoming_regions (
    region_id text,
    name      text,
    wkb       bytea
) ON COMMIT DROP
