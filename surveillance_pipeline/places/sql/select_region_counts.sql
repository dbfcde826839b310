-- One species' records per region: how many fell within it, how many were given it as the nearest.
SELECT assignment.region_id,
       coalesce(region.name, '')                                  AS name,
       count(*) FILTER (WHERE assignment.method = 'within')       AS within,
       count(*) FILTER (WHERE assignment.method = 'nearest')      AS nearest
FROM {table} AS assignment
LEFT JOIN {regions} AS region USING (region_id)
WHERE assignment.species_id = %(species_id)s
GROUP BY assignment.region_id, region.name
ORDER BY assignment.region_id
