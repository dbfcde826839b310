-- devil_snapshot's rows its export's policy keeps, in id order (the order the export names).
SELECT id, year, license, pick
FROM devil_snapshot
WHERE {kept}
ORDER BY id
