-- Nightshift schema v23 (PostgreSQL): retention. Kept in lockstep with
-- migrations/sqlite/0023_retention.sql.
--
-- `purged_at` marks a run whose history the purger removed (events, checkpoints, jobs,
-- approvals, tasks, outbox rows, notifications, check-run claims) while keeping its row as a
-- summary: agent, status, times, totals, input, result and error. NULL for every run that
-- still has its history. Older daemons ignore the column; they read a purged run as one with
-- no events.
ALTER TABLE runs ADD COLUMN purged_at BIGINT;

-- The purger's search: ended runs of one status that still hold history, oldest end first.
CREATE INDEX runs_purgeable ON runs (status, finished_at) WHERE purged_at IS NULL;
