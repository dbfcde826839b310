-- The rows of a devil_snapshot-shaped table in key order, as one md5.
SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, year, license, pick), E'\n' ORDER BY id), ''))
FROM {table}
