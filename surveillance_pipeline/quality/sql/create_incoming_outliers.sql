-- Per site of a species (a distinct point, or a cell's centre), whether the outliers test flags the
-- records there (no rows: not evaluated).
CREATE TEMPORARY TABLE incoming_outliers (
    lon      double precision,
    lat      double precision,
    outlier  boolean NOT NULL
) ON COMMIT DROP
