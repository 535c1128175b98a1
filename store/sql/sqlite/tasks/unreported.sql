-- A run's tasks whose ending the run's log does not hold yet, oldest first. ?1 run id
SELECT * FROM tasks WHERE run_id = ?1 AND reported_at IS NULL ORDER BY started_at, id
