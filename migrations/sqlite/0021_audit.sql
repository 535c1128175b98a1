-- Nightshift schema v21 (SQLite): the audit trail. Kept in lockstep with
-- migrations/postgres/0021_audit.sql, which says what it holds.
CREATE TABLE audit_log (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    actor  TEXT    NOT NULL,
    action TEXT    NOT NULL,
    run_id TEXT,
    target TEXT    NOT NULL,
    detail TEXT
);
CREATE INDEX audit_log_run ON audit_log (run_id, id) WHERE run_id IS NOT NULL;
ALTER TABLE approvals ADD COLUMN decided_by TEXT;
