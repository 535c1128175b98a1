-- A run that parks for an approval again (a message's job took its message while the call
-- still waited) arms one resume job for it: the one just armed, job $2, replaces the run's
-- other queued approval resumes. $1 run id, $3 now
UPDATE jobs SET status = 'cancelled', finished_at = $3, updated_at = $3
WHERE run_id = $1 AND id <> $2 AND status = 'queued' AND kind = 'resume'
  AND payload LIKE '{"type":"approval"%'
