-- Nightshift schema v24 (PostgreSQL): forks. Kept in lockstep with
-- migrations/sqlite/0024_forks.sql.
--
-- A fork is a run that starts from another run's history: `forked_from` names the parent and
-- `fork_seq` the last of the parent's events the fork shares. The fork's log is the parent's
-- log up to `fork_seq` (read through the parent's rows, never copied) followed by its own
-- events, which start at `fork_seq + 1` with a `forked` event. Both NULL for every other run.
-- Older daemons ignore the columns and would read a fork as a run of its own events only, so
-- every daemon on a store is upgraded before forks are made. No foreign key: a parent whose
-- summary row retention removed leaves its forks with a link to a run that is gone.
ALTER TABLE runs ADD COLUMN forked_from TEXT;
ALTER TABLE runs ADD COLUMN fork_seq BIGINT;

-- A run's forks: what retention checks before purging a parent, and the run page lists.
CREATE INDEX runs_forks ON runs (forked_from) WHERE forked_from IS NOT NULL;
