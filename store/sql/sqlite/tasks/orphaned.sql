-- The owner's running tasks whose run has finished: they are stopped. ?1 owner
SELECT t.id FROM tasks t JOIN runs r ON r.id = t.run_id
WHERE t.owner = ?1 AND t.status = 'running'
  AND r.status NOT IN ({live_run_states})
