-- $1 run id, $2 now
UPDATE jobs SET cancel_requested_at = COALESCE(cancel_requested_at, $2), updated_at = $2
WHERE run_id = $1 AND status = 'running'
RETURNING id
