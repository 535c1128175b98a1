-- A decision makes the run's armed approval job due now. $1 run, $2 now
UPDATE jobs SET run_at = $2, updated_at = $2
WHERE run_id = $1 AND status = 'queued' AND kind = 'resume'
  AND payload LIKE '{"type":"approval"%'
RETURNING id
