-- The limit a load is measured against: psql's \copy of the derived CSV (fed on psql's stdin) into a
-- staging table, then one INSERT ... SELECT building the geometry into a table identical to occurrences.
-- Run by psql with -v species_id=<n>; psql's variables never reach \copy, which reads pstdin.
BEGIN;
CREATE TEMPORARY TABLE staging (
    id        bigint,
    year      integer,
    longitude double precision,
    latitude  double precision,
    license   text
) ON COMMIT DROP;
\copy staging FROM pstdin WITH (FORMAT csv, HEADER true)
INSERT INTO limit_occurrences (id, species_id, year, longitude, latitude, license, geom)
SELECT id,
       :species_id,
       year,
       longitude,
       latitude,
       license,
       CASE WHEN longitude IS NULL THEN NULL
            ELSE ST_SetSRID(ST_MakePoint(longitude, latitude), 4326) END
FROM staging;
COMMIT;
