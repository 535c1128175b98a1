-- Nightshift schema v6 (PostgreSQL): approvals. Kept in lockstep with
-- migrations/sqlite/0006_approvals.sql.
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
    requested_at BIGINT  NOT NULL,
    expires_at   BIGINT  NOT NULL,
    decided_at   BIGINT,
    PRIMARY KEY (run_id, call_id)
);
CREATE INDEX approvals_pending ON approvals (requested_at) WHERE status = 'pending';
