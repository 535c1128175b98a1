-- Jobs whose worker stopped heartbeating: back to the queue, or dead-lettered when that was
-- their last attempt, or cancelled when cancellation had been requested. An attempt that
-- recorded progress under its lease (progress_token = lease_token, see record_progress) is
-- given back (attempts - 1) and never dead-letters the job: a crash that made progress is not
-- a failure. Rows another transaction holds are skipped. $1 now
WITH expired AS (
    SELECT id FROM jobs
    WHERE status = 'running' AND lease_expires_at <= $1
    FOR UPDATE SKIP LOCKED
), judged AS (
    SELECT j.id,
           j.progress_token IS NOT DISTINCT FROM j.lease_token AS progressed,
           j.cancel_requested_at IS NOT NULL AS cancelling
    FROM jobs j JOIN expired e ON j.id = e.id
)
UPDATE jobs j SET
    status = CASE
        WHEN d.cancelling THEN 'cancelled'
        WHEN NOT d.progressed AND j.attempts >= j.max_attempts THEN 'dead'
        ELSE 'queued' END,
    attempts = CASE WHEN d.progressed AND NOT d.cancelling THEN j.attempts - 1
                    ELSE j.attempts END,
    last_error = 'lease expired: worker ' || COALESCE(j.lease_owner, '?')
                 || ' stopped heartbeating during attempt ' || j.attempts || ' of '
                 || j.max_attempts
                 || CASE WHEN d.progressed
                         THEN ' after making progress; the attempt is not counted'
                         ELSE '' END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = CASE
        WHEN d.cancelling OR (NOT d.progressed AND j.attempts >= j.max_attempts) THEN $1 END,
    updated_at = $1
FROM judged d
WHERE j.id = d.id
RETURNING j.run_id, j.status, j.last_error, j.lane
