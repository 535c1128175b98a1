-- The earliest run_at among queued jobs, for timing the next claim without polling.
SELECT MIN(run_at) FROM jobs WHERE status = 'queued'
