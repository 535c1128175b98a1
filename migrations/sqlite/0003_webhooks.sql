-- Webhook deliveries (SQLite). Kept in lockstep with migrations/postgres/0003_webhooks.sql.
-- (Version 0002 is reserved for another change; versions only need to be unique.)
--
-- One row per (hook, delivery id): the delivery is claimed here before anything is enqueued,
-- and the runs it made are recorded here once they are enqueued, so a redelivery answers with
-- the original run ids and enqueues nothing. See scheduler/src/hooks/mod.rs for the protocol.
CREATE TABLE webhook_deliveries (
    hook              TEXT    NOT NULL,
    delivery_id       TEXT    NOT NULL,
    event             TEXT    NOT NULL,
    -- claimed: accepted, runs being enqueued; done: `runs` holds what was enqueued.
    status            TEXT    NOT NULL CHECK (status IN ('claimed', 'done')),
    -- JSON array of {route, kind, run_id, job_id, duplicate, skipped, superseded}.
    runs              TEXT,
    -- How many times this delivery arrived (1 + redeliveries).
    received          INTEGER NOT NULL DEFAULT 1 CHECK (received >= 1),
    first_received_at INTEGER NOT NULL,
    last_received_at  INTEGER NOT NULL,
    finished_at       INTEGER,
    PRIMARY KEY (hook, delivery_id)
);
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (hook, first_received_at);
