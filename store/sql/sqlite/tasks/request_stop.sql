-- Asks the owner of a running task to stop it. ?1 id, ?2 now
UPDATE tasks SET stop_requested_at = ?2
WHERE id = ?1 AND status = 'running'
RETURNING id
