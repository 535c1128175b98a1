-- Nightshift schema v1 (SQLite). Kept in lockstep with migrations/postgres/0001_init.sql:
-- same tables, same columns, same CHECK sets. Times are integer milliseconds since the Unix
-- epoch, always bound from the application's Clock (never SQLite's own clock), so that both
-- backends agree and tests can move time.

-- A run: one conversation of one agent, from its first prompt to a terminal state.
CREATE TABLE runs (
    id                  TEXT    PRIMARY KEY,
    agent               TEXT    NOT NULL,
    status              TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'waiting',
                            'awaiting_approval', 'succeeded', 'failed', 'cancelled',
                            'budget_exhausted', 'max_rounds', 'superseded')),
    trigger_kind        TEXT    NOT NULL CHECK (trigger_kind IN ('api', 'cli', 'webhook',
                            'schedule', 'wakeup', 'approval')),
    input               TEXT    NOT NULL,
    -- A second enqueue with the same key returns this run instead of making a new one.
    idempotency_key     TEXT    UNIQUE,
    concurrency_key     TEXT,
    agent_hash          TEXT,
    turns               INTEGER NOT NULL DEFAULT 0,
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens   INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens  INTEGER NOT NULL DEFAULT 0,
    cost_usd            REAL    NOT NULL DEFAULT 0,
    result              TEXT,
    error               TEXT,
    cancel_requested_at INTEGER,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    started_at          INTEGER,
    finished_at         INTEGER
);
CREATE INDEX runs_status ON runs (status, created_at);
CREATE INDEX runs_concurrency_key ON runs (concurrency_key) WHERE concurrency_key IS NOT NULL;

-- A job: one unit of queued work for a run. AUTOINCREMENT so that an id is never reused.
CREATE TABLE jobs (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id              TEXT    NOT NULL REFERENCES runs (id),
    kind                TEXT    NOT NULL CHECK (kind IN ('start', 'resume')),
    lane                TEXT    NOT NULL,
    priority            INTEGER NOT NULL DEFAULT 0,
    payload             TEXT    NOT NULL,
    run_at              INTEGER NOT NULL,
    attempts            INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts        INTEGER NOT NULL CHECK (max_attempts >= 1),
    dedupe_key          TEXT    UNIQUE,
    status              TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'succeeded',
                            'parked', 'dead', 'cancelled')),
    lease_owner         TEXT,
    -- The fencing token: grows by one on every claim. Every write a worker makes is
    -- conditional on the token it was issued.
    lease_token         INTEGER NOT NULL DEFAULT 0,
    lease_expires_at    INTEGER,
    cancel_requested_at INTEGER,
    last_error          TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    finished_at         INTEGER
);
-- Claiming reads only these partial indexes: queued work in claim order, and live leases by
-- expiry (for rescuing the jobs of dead workers).
CREATE INDEX jobs_claim ON jobs (priority DESC, run_at, id) WHERE status = 'queued';
CREATE INDEX jobs_claim_lane ON jobs (lane, priority DESC, run_at, id) WHERE status = 'queued';
CREATE INDEX jobs_lease_expiry ON jobs (lease_expires_at) WHERE status = 'running';
-- The earliest due time of queued work, so an idle pool sleeps exactly until it.
CREATE INDEX jobs_next_due ON jobs (run_at) WHERE status = 'queued';
CREATE INDEX jobs_run ON jobs (run_id);

-- The write-ahead log of a run. (run_id, seq) is unique, so an event is never written twice.
CREATE TABLE run_events (
    run_id      TEXT    NOT NULL REFERENCES runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    job_id      INTEGER NOT NULL,
    lease_token INTEGER NOT NULL,
    type        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Gzipped snapshots of a run's projected state, covering events up to through_seq.
CREATE TABLE checkpoints (
    run_id         TEXT    NOT NULL REFERENCES runs (id),
    through_seq    INTEGER NOT NULL CHECK (through_seq >= 0),
    format_version INTEGER NOT NULL CHECK (format_version >= 1),
    body           BLOB    NOT NULL,
    size_bytes     INTEGER NOT NULL,
    job_id         INTEGER NOT NULL,
    lease_token    INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (run_id, through_seq)
);

-- Worker processes, for operators: who holds leases and when each was last heard from.
CREATE TABLE workers (
    id                TEXT    PRIMARY KEY,
    host              TEXT    NOT NULL,
    pid               INTEGER NOT NULL,
    started_at        INTEGER NOT NULL,
    last_heartbeat_at INTEGER NOT NULL
);
