-- Per distinct point of a species, whether the outliers test flags it (no rows: not evaluated).
CREATE TEMPORARY TABLE incoming_outliers (
    lon      double precision,
    lat      double precision,
    outlier  boolean NOT NULL
) ON COMMIT DROP
