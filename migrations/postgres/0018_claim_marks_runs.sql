-- Nightshift schema v18 (PostgreSQL): kept in lockstep with
-- migrations/sqlite/0018_claim_marks_runs.sql, which makes SQLite's claims mark their runs
-- running in the claim's own statement. PostgreSQL's claim statements do that in their
-- writing CTE already: nothing changes.
SELECT 1;
