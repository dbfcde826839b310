-- occurrence_quality, schema version 1: per record of occurrences, the GBIF terms analysts filter by and
-- one flag per quality test (true: flagged; false: passed; null: not evaluated, the test being disabled
-- or the record lacking what it reads). first_flag: the first test, in the tests' fixed order, that
-- flagged the record (null: none did). Keyed like occurrences, by (species_id, id).
CREATE TABLE {table} (
    id                        bigint            NOT NULL,  -- GBIF's gbifID
    species_id                integer           NOT NULL,
    basis_of_record           text,
    occurrence_status         text,
    establishment_means       text,
    individual_count          integer,
    event_date                text,
    country_code              text,
    dataset_key               text,
    institution_code          text,
    coordinate_uncertainty_m  double precision,
    coordinate_precision      double precision,
    issues                    text[]            NOT NULL,
    -- The coordinates as published (occurrences drops a point at 0,0, which zero still sees).
    decimal_longitude         double precision,
    decimal_latitude          double precision,
    flag_gbif_issues          boolean,
    flag_basis                boolean,
    flag_uncertainty          boolean,
    flag_precision            boolean,
    flag_old                  boolean,
    flag_zero                 boolean,
    flag_equal                boolean,
    flag_capitals             boolean,
    flag_centroids            boolean,
    flag_gbif_hq              boolean,
    flag_sea                  boolean,
    flag_urban                boolean,
    flag_country              boolean,
    flag_duplicates           boolean,
    flag_outliers             boolean,
    first_flag                text,
    PRIMARY KEY (species_id, id)
);
