-- Statistics for the species' new partition as soon as its load commits, not when autovacuum gets to it:
-- the assets downstream read this partition in the same run, and a table never analyzed is planned as
-- 2,500 rows. Paged by id, masked_release then sorted all the rows after each page's first id, once per
-- page (5M rows: 8x the time of 1M).
ANALYZE {partition};
