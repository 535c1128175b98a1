-- For the sweep of a daemon's task logs: of the task ids named, those whose row still exists.
-- $1 JSON array of task ids
SELECT id FROM tasks WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb))
