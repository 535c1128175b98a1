-- Nightshift schema v9 (SQLite): jobs_next_due holds queued jobs without a lease owner (all
-- of them), as on PostgreSQL. Kept in lockstep with migrations/postgres/0009_next_due_index.sql,
-- which says why: there the condition keeps the planner from choosing this index for a
-- claim. SQLite's claims name their index (INDEXED BY) and were never at risk; the index is
-- the same here so that next_due.sql reads the same on both backends.
DROP INDEX jobs_next_due;
CREATE INDEX jobs_next_due ON jobs (run_at) WHERE status = 'queued' AND lease_owner IS NULL;
