-- Makes a waiting run's pending resume job due now. ?1 run id, ?2 now
UPDATE jobs SET run_at = ?2, updated_at = ?2
WHERE run_id = ?1 AND status = 'queued' AND kind = 'resume'
  AND EXISTS (SELECT 1 FROM runs r WHERE r.id = ?1 AND r.status = 'waiting')
RETURNING id
