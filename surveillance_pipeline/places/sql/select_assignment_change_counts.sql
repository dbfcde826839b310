-- What a species' assignment delta will find (create_assignment_changes.sql): records added, changed and
-- removed.
SELECT count(*) FILTER (WHERE change = 'added'),
       count(*) FILTER (WHERE change = 'changed'),
       count(*) FILTER (WHERE change = 'removed')
FROM assignment_changes
