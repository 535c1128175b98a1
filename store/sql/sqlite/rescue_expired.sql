-- Jobs whose worker stopped heartbeating: back to the queue, or dead-lettered when that was
-- their last attempt, or cancelled when cancellation had been requested. ?1 now
UPDATE jobs SET
    status = CASE
        WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
        WHEN attempts >= max_attempts THEN 'dead'
        ELSE 'queued' END,
    last_error = 'lease expired: worker ' || COALESCE(lease_owner, '?')
                 || ' stopped heartbeating during attempt ' || attempts || ' of ' || max_attempts,
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = CASE
        WHEN cancel_requested_at IS NOT NULL OR attempts >= max_attempts THEN ?1 END,
    updated_at = ?1
WHERE status = 'running' AND lease_expires_at <= ?1
RETURNING run_id, status, last_error
