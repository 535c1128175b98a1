-- Nightshift schema v20 (PostgreSQL): who makes a run's check run. Kept in lockstep with
-- migrations/sqlite/0020_check_run_claims.sql.
--
-- GitHub has no idempotency key for creating a check run, so a run's check run of a name is
-- made by one caller at a time: whoever inserts (or takes over a stale) row here. The row
-- says when the making was last claimed (ms) and, once GitHub answered, the check run's id.
-- A caller that finds a fresh claim without an id does not create one of its own (a job
-- starting the run leaves it to the maker; a completion retries later), so a slow answer, a
-- push racing the start and a second daemon all converge on one check run. A claim without
-- an id grows stale after a while (its maker died or lost GitHub's answer); the next caller
-- then looks for the check run by external_id before creating it.
CREATE TABLE run_check_runs (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    claimed_at BIGINT NOT NULL,
    check_run_id BIGINT,
    PRIMARY KEY (run_id, name)
);
