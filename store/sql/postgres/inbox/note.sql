-- Sets the leased job's last_error to say why it ended without doing anything (its run had
-- already ended). Fenced by the lease. $1 job id, $2 token, $3 text, $4 now
UPDATE jobs SET last_error = $3, updated_at = $4
WHERE id = $1 AND lease_token = $2 AND status = 'running'
RETURNING id
