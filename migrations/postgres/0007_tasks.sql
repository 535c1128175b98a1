-- Nightshift schema v7 (PostgreSQL): background tasks. Kept in lockstep with
-- migrations/sqlite/0007_tasks.sql.
--
-- One row per command an agent started with `run_command {background: true}`. The daemon
-- running it (`owner`) refreshes `heartbeat_at` while it runs; a running task whose owner
-- stopped refreshing is marked `lost` by any daemon, never `succeeded` (and its owner, if
-- it comes back, kills it). `reported_at` is
-- set once the run's log holds the task's ending, so each ending reaches the model once.
CREATE TABLE tasks (
    id           TEXT    PRIMARY KEY,
    run_id       TEXT    NOT NULL REFERENCES runs (id),
    call_id      TEXT    NOT NULL,
    command      TEXT    NOT NULL,
    owner        TEXT    NOT NULL,
    status       TEXT    NOT NULL
        CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'stopped', 'lost')),
    exit_code    BIGINT,
    detail       TEXT,
    output_tail  TEXT,
    output_bytes BIGINT  NOT NULL DEFAULT 0,
    started_at   BIGINT  NOT NULL,
    deadline_at  BIGINT  NOT NULL,
    heartbeat_at BIGINT  NOT NULL,
    ended_at     BIGINT,
    reported_at  BIGINT,
    -- Set by task_stop on a daemon that does not run the task; the owner stops it.
    stop_requested_at BIGINT
);
CREATE INDEX tasks_run ON tasks (run_id);
CREATE INDEX tasks_running ON tasks (heartbeat_at) WHERE status = 'running';
CREATE INDEX tasks_unreported ON tasks (run_id) WHERE reported_at IS NULL;
