CREATE TEMPORARY TABLE assignment_points (
    id           bigint PRIMARY KEY,
    point_source text   NOT NULL,
    geom         geometry(Point, 4326) NOT NULL
) ON COMMIT DROP
