-- A new resume of a waiting run replaces its pending wakeup, or the resume armed while it
-- waits for its background tasks (the runtime tells the model it was woken early).
-- $1 run id, $2 the new job's id, $3 now
UPDATE jobs SET status = 'cancelled', finished_at = $3, updated_at = $3
WHERE run_id = $1 AND id <> $2 AND status = 'queued' AND kind = 'resume'
  AND (payload LIKE '{"type":"wakeup"%' OR payload LIKE '{"type":"task"%')
