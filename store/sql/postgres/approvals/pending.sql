-- Pending approvals, oldest first. $1 limit
SELECT * FROM approvals WHERE status = 'pending' ORDER BY requested_at, run_id, call_id LIMIT $1
