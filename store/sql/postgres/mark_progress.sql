-- Marks the current attempt of the leased job as having made progress (see
-- migrations/postgres/0012_progress_token.sql), in record_progress's transaction.
-- $1 job id, $2 token
UPDATE jobs SET progress_token = lease_token
WHERE id = $1 AND lease_token = $2 AND status = 'running'
RETURNING run_id
