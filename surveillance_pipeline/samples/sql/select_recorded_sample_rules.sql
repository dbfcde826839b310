-- Per sampled species: the occurrences config and the sample cap its state rows were built with.
SELECT sample.partition_key,
       species.species_id,
       loaded.parts -> 'config' AS occurrence_config,
       sample.parts -> 'config' AS sample_config
FROM target_state AS sample
JOIN target_state AS loaded ON loaded.target = 'occurrences' AND loaded.partition_key = sample.partition_key
JOIN species ON species.slug = sample.partition_key
WHERE sample.target = 'occurrence_sample'
ORDER BY species.species_id
