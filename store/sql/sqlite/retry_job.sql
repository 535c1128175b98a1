-- Re-queues the leased job at ?3, or dead-letters it when it has used its last attempt, or
-- cancels it when cancellation was requested. ?6 false makes it a deferral: the attempt is
-- given back (attempts - 1) and the job is never dead-lettered.
-- ?1 job id, ?2 token, ?3 run_at, ?4 error, ?5 now, ?6 whether the attempt counts
UPDATE jobs SET
    status = CASE
        WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
        WHEN ?6 AND attempts >= max_attempts THEN 'dead'
        ELSE 'queued' END,
    run_at = CASE
        WHEN cancel_requested_at IS NOT NULL OR (?6 AND attempts >= max_attempts) THEN run_at
        ELSE ?3 END,
    attempts = CASE
        WHEN cancel_requested_at IS NULL AND NOT ?6 THEN attempts - 1
        ELSE attempts END,
    last_error = ?4,
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = CASE
        WHEN cancel_requested_at IS NOT NULL OR (?6 AND attempts >= max_attempts) THEN ?5 END,
    updated_at = ?5
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
RETURNING run_id, status
