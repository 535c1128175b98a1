-- Jobs whose worker stopped heartbeating: back to the queue, or dead-lettered when that was
-- their last attempt, or cancelled when cancellation had been requested. Rows another
-- transaction holds are skipped. $1 now
WITH expired AS (
    SELECT id FROM jobs
    WHERE status = 'running' AND lease_expires_at <= $1
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET
    status = CASE
        WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
        WHEN j.attempts >= j.max_attempts THEN 'dead'
        ELSE 'queued' END,
    last_error = 'lease expired: worker ' || COALESCE(j.lease_owner, '?')
                 || ' stopped heartbeating during attempt ' || j.attempts || ' of '
                 || j.max_attempts,
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = CASE
        WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts THEN $1 END,
    updated_at = $1
FROM expired
WHERE j.id = expired.id
RETURNING j.run_id, j.status, j.last_error
