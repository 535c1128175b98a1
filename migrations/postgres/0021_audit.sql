-- Nightshift schema v21 (PostgreSQL): the audit trail. Kept in lockstep with
-- migrations/sqlite/0021_audit.sql.
--
-- One row per operator action (API, CLI, dashboard): when (ms), who (a named API token, a
-- dashboard session's token name, or the CLI's user), what (`approve`, `deny`, `cancel`,
-- `wake`, `message`, `schedule_create`, `schedule_update`, `schedule_delete`,
-- `schedule_trigger`, `redeliver`), the run it touched when it touched one, the thing acted
-- on (a run id, a schedule name, a delivery id) and what was said (a reason, the changed keys).
-- Rows are only ever added. `approvals.decided_by` names who decided a call.
CREATE TABLE audit_log (
    id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     BIGINT NOT NULL,
    actor  TEXT   NOT NULL,
    action TEXT   NOT NULL,
    run_id TEXT,
    target TEXT   NOT NULL,
    detail TEXT
);
CREATE INDEX audit_log_run ON audit_log (run_id, id) WHERE run_id IS NOT NULL;
ALTER TABLE approvals ADD COLUMN decided_by TEXT;
