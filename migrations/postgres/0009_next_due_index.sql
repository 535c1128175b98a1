-- Nightshift schema v9 (PostgreSQL): jobs_next_due can no longer be chosen for a claim.
-- Kept in lockstep with migrations/sqlite/0009_next_due_index.sql.
--
-- A claim walks jobs_claim (priority DESC, run_at, id) in claim order and stops after its
-- limit. Version 1's jobs_next_due (run_at) WHERE status = 'queued' could serve the claim's
-- `run_at <= now` too, and when the table's statistics say few jobs are queued (analyzed
-- while the queue was empty, the usual state of a quiet queue before a burst) the planner
-- took it: a scan of every queued job and a sort, on every claim, until autovacuum analyzed
-- the table again. Measured: 3.6 ms a claim with 4,800 jobs queued instead of 0.03 ms.
-- PostgreSQL has no index hints, so the index now carries a condition that claims never
-- state: a queued job never has a lease owner (every statement that queues a job clears
-- it), so the index holds the same jobs, next_due.sql states the condition, and a claim
-- cannot prove it and so cannot use the index.
--
-- Building the index reads the whole jobs table once, with writes to it blocked meanwhile.
DROP INDEX jobs_next_due;
CREATE INDEX jobs_next_due ON jobs (run_at) WHERE status = 'queued' AND lease_owner IS NULL;
