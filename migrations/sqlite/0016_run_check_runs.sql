-- Nightshift schema v16 (SQLite): the check runs a run opened. Kept in lockstep with
-- migrations/postgres/0016_run_check_runs.sql, which says what it holds.
ALTER TABLE runs ADD COLUMN check_runs TEXT;
