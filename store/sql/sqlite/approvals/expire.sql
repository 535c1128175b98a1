-- The timeout denies: a pending approval past its expiry becomes expired. ?1 run,
-- ?2 call id, ?3 now
UPDATE approvals SET status = 'expired', reason = 'no decision before the approval timed out',
    decided_at = ?3
WHERE run_id = ?1 AND call_id = ?2 AND status = 'pending' AND expires_at <= ?3
RETURNING call_id
