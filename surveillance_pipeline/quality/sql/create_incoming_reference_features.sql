-- One Natural Earth feature per row, as its file holds it, before it is repaired and cut into pieces.
CREATE TEMPORARY TABLE incoming_reference_features (
    layer    text,
    feature  integer,
    code     text,
    name     text,
    geojson  text
) ON COMMIT DROP
