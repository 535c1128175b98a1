-- The earliest due time among queued jobs due by $1 (now), NULL when none: the first entry
-- of jobs_next_due (see next_due.sql for why not MIN).
SELECT (SELECT run_at FROM jobs WHERE status = 'queued' AND lease_owner IS NULL AND run_at <= $1
        ORDER BY run_at LIMIT 1)
