-- Decides a pending approval before it expires. ?1 run, ?2 call id, ?3 status,
-- ?4 reason, ?5 now
UPDATE approvals SET status = ?3, reason = ?4, decided_at = ?5
WHERE run_id = ?1 AND call_id = ?2 AND status = 'pending' AND expires_at > ?5
RETURNING call_id
