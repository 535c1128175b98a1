-- Gives the job back to the queue at once, without counting the attempt (the worker is
-- shutting down; the job did not fail). ?1 job id, ?2 token, ?3 reason, ?4 now
UPDATE jobs SET
    status = 'queued',
    attempts = attempts - 1,
    last_error = ?3,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = ?4
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
RETURNING run_id
