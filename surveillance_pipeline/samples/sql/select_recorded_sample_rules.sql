-- Per sampled species: the occurrences config and the sample cap its state rows were built with.
SELECT sample.partition_key,
       species.species_id,
       loaded.parts -> 'config' AS occurrence_config,
       sample.parts -> 'config' AS sample_config
FROM job_state AS sample
JOIN job_state AS loaded ON loaded.job = 'occurrences' AND loaded.partition_key = sample.partition_key
JOIN species ON species.slug = sample.partition_key
WHERE sample.job = 'occurrence_sample'
ORDER BY species.species_id
