-- ?1 run id, ?2 now
UPDATE jobs SET status = 'cancelled', cancel_requested_at = COALESCE(cancel_requested_at, ?2),
    finished_at = ?2, updated_at = ?2
WHERE run_id = ?1 AND status = 'queued'
