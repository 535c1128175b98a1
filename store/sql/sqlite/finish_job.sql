-- Ends the leased attempt. ?1 job id, ?2 token, ?3 new status, ?4 last_error, ?5 now
UPDATE jobs SET
    status = ?3,
    last_error = COALESCE(?4, last_error),
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = ?5,
    updated_at = ?5
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
RETURNING run_id, cancel_requested_at, concurrency_key
