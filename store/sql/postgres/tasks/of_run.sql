-- A run's tasks, oldest first. $1 run id
SELECT * FROM tasks WHERE run_id = $1 ORDER BY started_at, id
