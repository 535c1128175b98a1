-- Pending approvals of unfinished runs, oldest first. ?1 limit
SELECT a.* FROM approvals a JOIN runs r ON r.id = a.run_id
WHERE a.status = 'pending'
  AND r.status IN ({live_run_states})
ORDER BY a.requested_at, a.run_id, a.call_id
LIMIT ?1
