-- Cron schedules and leader leases (SQLite). Kept in lockstep with
-- migrations/postgres/0004_schedules.sql. Times are integer milliseconds from the Clock.

-- A cron schedule. `next_fire_at` is the durable timer: the next fire the daemon owes, so a
-- daemon that was down finds the fires it missed. NULL while the schedule is disabled.
CREATE TABLE schedules (
    -- Part of each fire's idempotency key (schedule:{id}:{fire_ms}); a schedule deleted and
    -- made again under the same name gets a new id.
    id            TEXT    PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    -- 'config' rows are re-applied from nightshift.toml at start and read-only in the API.
    source        TEXT    NOT NULL CHECK (source IN ('config', 'api')),
    cron          TEXT    NOT NULL,
    timezone      TEXT    NOT NULL,
    agent         TEXT    NOT NULL,
    prompt        TEXT    NOT NULL,
    overlap       TEXT    NOT NULL CHECK (overlap IN ('skip', 'queue', 'allow')),
    missed        TEXT    NOT NULL CHECK (missed IN ('skip', 'run_once')),
    enabled       BOOLEAN NOT NULL,
    next_fire_at  INTEGER,
    last_fire_at  INTEGER,
    last_run_id   TEXT,
    fired_count   INTEGER NOT NULL DEFAULT 0,
    skipped_count INTEGER NOT NULL DEFAULT 0,
    missed_count  INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;

-- Which daemon runs a singleton loop (the schedule timer). Taken and renewed by one guarded
-- upsert; `epoch` grows whenever the lease changes hands, and writes made as leader check it.
CREATE TABLE leader_leases (
    name        TEXT    PRIMARY KEY,
    holder      TEXT    NOT NULL,
    epoch       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
