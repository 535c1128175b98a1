-- Decides a pending approval of an unfinished run before it expires. ?1 run, ?2 call id, ?3 status,
-- ?4 reason, ?5 now, ?6 who decided
UPDATE approvals SET status = ?3, reason = ?4, decided_at = ?5, decided_by = ?6
WHERE run_id = ?1 AND call_id = ?2 AND status = 'pending' AND expires_at > ?5
  AND EXISTS (SELECT 1 FROM runs r WHERE r.id = ?1
              AND r.status IN ({live_run_states}))
RETURNING call_id
