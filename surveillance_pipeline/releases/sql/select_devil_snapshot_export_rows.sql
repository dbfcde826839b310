SELECT id, year, license, pick
FROM devil_snapshot
ORDER BY id
