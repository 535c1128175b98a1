-- How many tasks of a run are running. $1 run id
SELECT COUNT(*) FROM tasks WHERE run_id = $1 AND status = 'running'
