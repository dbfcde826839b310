-- Rows of the species in one table and not the other, both ways: 0 and 0 when the two hold the same rows.
SELECT (SELECT count(*) FROM (SELECT id, species_id, point_source, region_id, method, distance_m
                              FROM {project} WHERE species_id = %(species_id)s
                              EXCEPT ALL
                              SELECT id, species_id, point_source, region_id, method, distance_m
                              FROM {limit}) AS only_project),
       (SELECT count(*) FROM (SELECT id, species_id, point_source, region_id, method, distance_m
                              FROM {limit}
                              EXCEPT ALL
                              SELECT id, species_id, point_source, region_id, method, distance_m
                              FROM {project} WHERE species_id = %(species_id)s) AS only_limit)
