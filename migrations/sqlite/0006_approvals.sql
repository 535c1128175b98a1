-- Nightshift schema v6 (SQLite): approvals. Kept in lockstep with
-- migrations/postgres/0006_approvals.sql.
--
-- One row per tool call that needs a human's decision. The row is bound to the exact call
-- (run, call id, tool, a hash of its input) and decided at most once: pending → approved,
-- denied or expired (the timeout denies).
CREATE TABLE approvals (
    run_id       TEXT    NOT NULL REFERENCES runs (id),
    call_id      TEXT    NOT NULL,
    tool         TEXT    NOT NULL,
    input        TEXT    NOT NULL,
    input_hash   TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    reason       TEXT,
    requested_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    decided_at   INTEGER,
    PRIMARY KEY (run_id, call_id)
);
CREATE INDEX approvals_pending ON approvals (requested_at) WHERE status = 'pending';
