-- The earliest due time among queued jobs due by $1 (now), from jobs_next_due.
SELECT MIN(run_at) FROM jobs WHERE status = 'queued' AND lease_owner IS NULL AND run_at <= $1
