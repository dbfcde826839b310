-- The course's summary: records, species, and md5 of every picked id in id order.
SELECT count(*) AS records,
       count(DISTINCT species_id) AS species,
       md5(coalesce(string_agg(CAST(id AS VARCHAR), ',' ORDER BY id), '')) AS ids_md5
FROM occurrence_sample
