-- Transform 2: as transform 1, and records without a year are dropped before the cap.
INSERT INTO {target} (id, year, license, pick)
SELECT id, year, license, row_number() OVER (ORDER BY md5(CAST(id AS VARCHAR)), id)
FROM incoming_delivery
WHERE license = ANY(%(licenses)s)
  AND year IS NOT NULL
ORDER BY md5(CAST(id AS VARCHAR)), id
LIMIT %(cap)s
