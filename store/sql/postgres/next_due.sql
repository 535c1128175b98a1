-- The earliest run_at among queued jobs (NULL when none), for timing the next claim without
-- polling. A queued job never has a lease owner; the condition says so to match
-- jobs_next_due, whose condition keeps claims off it (migration 0009 says why).
--
-- The first entry of jobs_next_due, not MIN(run_at): on a table not yet analysed, PostgreSQL
-- planned MIN as an aggregate over every entry of the index (20,000 runs asleep: 7-10 ms on
-- every idle pool's wait, and a pickup behind it), where the ordered scan with a limit reads
-- one entry (0.05 ms) whatever the statistics say.
SELECT (SELECT run_at FROM jobs WHERE status = 'queued' AND lease_owner IS NULL
        ORDER BY run_at LIMIT 1)
