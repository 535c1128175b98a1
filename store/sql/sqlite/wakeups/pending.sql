-- Waiting runs and the resume job each waits for, soonest first. ?1 limit
SELECT r.id AS run_id, r.agent, j.id AS job_id, j.run_at AS due_at, j.payload
FROM jobs j JOIN runs r ON r.id = j.run_id
WHERE j.status = 'queued' AND j.kind = 'resume' AND r.status = 'waiting'
ORDER BY j.run_at, j.id
LIMIT ?1
