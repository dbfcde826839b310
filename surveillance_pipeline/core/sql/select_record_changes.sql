-- How many records a delta would add, change and remove, and how many the partition holds after it.
SELECT count(*) FILTER (WHERE added),
       count(*) FILTER (WHERE NOT added AND NOT removed),
       count(*) FILTER (WHERE removed),
       (SELECT count(*) FROM {next})
FROM record_changes
