-- The owner's tasks are alive. $1 owner, $2 now
UPDATE tasks SET heartbeat_at = $2 WHERE owner = $1 AND status = 'running'
