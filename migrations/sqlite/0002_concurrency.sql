-- Nightshift schema v2 (SQLite): concurrency keys on jobs. Kept in lockstep with
-- migrations/postgres/0002_concurrency.sql.
--
-- A job carries its run's concurrency key, so that claiming can skip jobs whose key is held
-- by a running job: at most one job per key runs at a time, whatever the key's policy.
ALTER TABLE jobs ADD COLUMN concurrency_key TEXT;
UPDATE jobs SET concurrency_key = (SELECT r.concurrency_key FROM runs r WHERE r.id = jobs.run_id);
-- Who holds a key: its running job (at most one).
CREATE INDEX jobs_running_key ON jobs (concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
-- The active runs of a key, for the skip, supersede and debounce policies.
DROP INDEX runs_concurrency_key;
CREATE INDEX runs_concurrency_key ON runs (concurrency_key, created_at)
    WHERE concurrency_key IS NOT NULL
      AND status IN ('queued', 'running', 'waiting', 'awaiting_approval');
