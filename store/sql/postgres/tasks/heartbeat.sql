-- The owner's tasks are alive; returns those still running (a task missing from the answer
-- was marked lost meanwhile) and whether a stop was asked for. $1 owner, $2 now
UPDATE tasks SET heartbeat_at = $2 WHERE owner = $1 AND status = 'running'
RETURNING id, stop_requested_at IS NOT NULL AS stop_requested
