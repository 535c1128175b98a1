-- The earliest run_at among queued jobs (NULL when none), for timing the next claim without
-- polling. A queued job never has a lease owner; the condition says so to match
-- jobs_next_due, whose condition keeps claims off it (migration 0009 says why).
--
-- The first entry of jobs_next_due, as PostgreSQL's next_due.sql (where MIN could be planned
-- as an aggregate over the whole index); SQLite reads one entry either way.
SELECT (SELECT run_at FROM jobs WHERE status = 'queued' AND lease_owner IS NULL
        ORDER BY run_at LIMIT 1)
