-- Whether the approval of a call was decided (or expired) already. ?1 run, ?2 call id
SELECT COUNT(*) FROM approvals WHERE run_id = ?1 AND call_id = ?2 AND status <> 'pending'
