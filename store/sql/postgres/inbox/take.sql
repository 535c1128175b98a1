-- Ends message job $1 of run $2 as taken by the running job of its run (succeeded: its
-- message is in the run's log, appended in the same transaction). Only a job still queued:
-- one cancelled meanwhile matches no row. $3 now
UPDATE jobs SET status = 'succeeded', finished_at = $3, updated_at = $3
WHERE id = $1 AND run_id = $2 AND kind = 'resume' AND status = 'queued'
RETURNING id
