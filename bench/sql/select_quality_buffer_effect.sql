-- How many of the real records ({points}: key, species, lon, lat, country) lie off Natural Earth's land,
-- and farther than each buffer from it; and outside their country's polygon, farther than each buffer.
SELECT count(*),
       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM quality_references AS r
                                          WHERE r.layer = 'land' AND ST_Intersects(r.geom, p.geom))),
       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM quality_references AS r
                                          WHERE r.layer = 'land' AND ST_DWithin(r.geog, p.geog, 1000))),
       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM quality_references AS r
                                          WHERE r.layer = 'land' AND ST_DWithin(r.geog, p.geog, 2000))),
       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM quality_references AS r
                                          WHERE r.layer = 'land' AND ST_DWithin(r.geog, p.geog, 5000))),
       count(*) FILTER (WHERE p.country <> '' AND NOT EXISTS (
           SELECT 1 FROM quality_references AS r
           WHERE r.layer = 'countries' AND r.code = p.country AND ST_Intersects(r.geom, p.geom))),
       count(*) FILTER (WHERE p.country <> '' AND NOT EXISTS (
           SELECT 1 FROM quality_references AS r
           WHERE r.layer = 'countries' AND r.code = p.country AND ST_DWithin(r.geog, p.geog, 5000))),
       count(*) FILTER (WHERE p.country <> '' AND NOT EXISTS (
           SELECT 1 FROM quality_references AS r
           WHERE r.layer = 'countries' AND r.code = p.country AND ST_DWithin(r.geog, p.geog, 10000)))
FROM (
    SELECT country, ST_SetSRID(ST_MakePoint(lon, lat), 4326) AS geom,
           ST_SetSRID(ST_MakePoint(lon, lat), 4326)::geography AS geog
    FROM {points}
) AS p
