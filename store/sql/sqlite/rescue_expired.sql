-- Jobs whose worker stopped heartbeating: back to the queue, or dead-lettered when that was
-- their last attempt, or cancelled when cancellation had been requested. An attempt that
-- recorded progress under its lease (progress_token = lease_token, see record_progress) is
-- given back (attempts - 1) and never dead-letters the job: a crash that made progress is not
-- a failure. (`IS` is SQLite's null-safe equality.) ?1 now
UPDATE jobs SET
    status = CASE
        WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
        WHEN progress_token IS NOT lease_token AND attempts >= max_attempts THEN 'dead'
        ELSE 'queued' END,
    attempts = CASE
        WHEN progress_token IS lease_token AND cancel_requested_at IS NULL THEN attempts - 1
        ELSE attempts END,
    last_error = 'lease expired: worker ' || COALESCE(lease_owner, '?')
                 || ' stopped heartbeating during attempt ' || attempts || ' of ' || max_attempts
                 || CASE WHEN progress_token IS lease_token
                         THEN ' after making progress; the attempt is not counted'
                         ELSE '' END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = CASE
        WHEN cancel_requested_at IS NOT NULL
          OR (progress_token IS NOT lease_token AND attempts >= max_attempts) THEN ?1 END,
    updated_at = ?1
WHERE status = 'running' AND lease_expires_at <= ?1
RETURNING run_id, status, last_error, lane
