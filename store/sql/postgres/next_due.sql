-- The earliest run_at among queued jobs, for timing the next claim without polling. A queued
-- job never has a lease owner; the condition says so to match jobs_next_due, whose condition
-- keeps claims off it (migration 0009 says why).
SELECT MIN(run_at) FROM jobs WHERE status = 'queued' AND lease_owner IS NULL
