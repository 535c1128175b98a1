-- Nightshift schema v19 (SQLite): a run's inbox closes before it ends. Kept in lockstep with
-- migrations/postgres/0019_run_inbox.sql, which says what it holds.
ALTER TABLE runs ADD COLUMN inbox_closed_at INTEGER;
