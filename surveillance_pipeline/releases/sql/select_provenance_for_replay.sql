SELECT asset, partition_key, job_key, parts, detail
FROM provenance
WHERE id = %(id)s
