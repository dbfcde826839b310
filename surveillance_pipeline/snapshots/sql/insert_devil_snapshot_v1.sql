-- Transform 1: the configured licenses, then the first %(cap)s by md5 of the id text, then id.
INSERT INTO {target} (id, year, license, pick)
SELECT id, year, license, row_number() OVER (ORDER BY md5(CAST(id AS VARCHAR)), id)
FROM incoming_delivery
WHERE license = ANY(%(licenses)s)
ORDER BY md5(CAST(id AS VARCHAR)), id
LIMIT %(cap)s
