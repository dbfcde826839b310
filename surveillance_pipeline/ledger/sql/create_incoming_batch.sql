CREATE TEMPORARY TABLE incoming_batch (
    id           bigint,
    species_slug text,
    year         integer,
    longitude    double precision,
    latitude     double precision,
    license      text
) ON COMMIT DROP
