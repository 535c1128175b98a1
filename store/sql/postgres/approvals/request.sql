-- Records a call waiting for a decision; a second request for the same call changes nothing.
-- $1 run, $2 call id, $3 tool, $4 input, $5 input hash, $6 now, $7 expires at
INSERT INTO approvals (run_id, call_id, tool, input, input_hash, status, requested_at, expires_at)
VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7)
ON CONFLICT (run_id, call_id) DO NOTHING
