-- How many records a delta makes the rows of (create_quality_candidates.sql or its _of_lines form).
SELECT count(*) FROM quality_candidates
