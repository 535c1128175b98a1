-- Nightshift schema v20 (SQLite): who makes a run's check run. Kept in lockstep with
-- migrations/postgres/0020_check_run_claims.sql, which says what it holds.
CREATE TABLE run_check_runs (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    claimed_at INTEGER NOT NULL,
    check_run_id INTEGER,
    PRIMARY KEY (run_id, name)
);
