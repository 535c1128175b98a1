-- Nightshift schema v13 (SQLite): indexes for listing runs and for the queue overview. Kept in
-- lockstep with migrations/postgres/0013_runs_listing.sql.
--
-- Store::runs_page lists runs newest first by (created_at DESC, id DESC) from a keyset
-- cursor, optionally with one equality filter leading: each index below lets the first page
-- of its filter (and every later page) be read from the index in order, stopping after the
-- page, however many runs there are. runs_status gains id so that runs of one status are in
-- keyset order too (the claim's statements never use it; see mark_runs_running.sql).
CREATE INDEX runs_created ON runs (created_at, id);
CREATE INDEX runs_agent_created ON runs (agent, created_at, id);
DROP INDEX runs_status;
CREATE INDEX runs_status ON runs (status, created_at, id);
CREATE INDEX runs_trigger_created ON runs (trigger_kind, created_at, id);
CREATE INDEX runs_key_created ON runs (concurrency_key, created_at, id)
    WHERE concurrency_key IS NOT NULL;
-- Store::queue_overview counts the live jobs (queued, running, parked) per state and lane
-- from this index alone; finished jobs, most of the table, are not in it.
CREATE INDEX jobs_live_state_lane ON jobs (status, lane)
    WHERE status IN ('queued', 'running', 'parked');
