-- Per test, the records of a species it was the first reason to flag (the tests' fixed order decides).
SELECT first_flag, count(*)
FROM {table}
WHERE species_id = %(species_id)s AND first_flag IS NOT NULL
GROUP BY first_flag
ORDER BY first_flag
