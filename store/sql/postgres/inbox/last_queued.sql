-- Where a message for run $1 queues: behind every job of the run already queued (a start job
-- not yet claimed, a retry, a message sent before), so it never overtakes the job that would
-- begin or continue the run: the latest due time and the lowest priority among them (NULLs
-- when none is queued).
SELECT MAX(run_at) AS run_at, MIN(priority) AS priority FROM jobs
WHERE run_id = $1 AND status = 'queued'
