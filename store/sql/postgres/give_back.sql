-- Returns a job just claimed in this transaction to the queue, as if never claimed (its key
-- is held). $1 job id, $2 now
UPDATE jobs SET status = 'queued', attempts = attempts - 1, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = $2
WHERE id = $1
