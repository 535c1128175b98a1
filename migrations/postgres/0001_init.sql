-- Nightshift schema v1 (PostgreSQL). Kept in lockstep with migrations/sqlite/0001_init.sql:
-- same tables, same columns, same CHECK sets. Times are integer milliseconds since the Unix
-- epoch, always bound from the application's Clock (never the server's now()), so that both
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
    turns               BIGINT  NOT NULL DEFAULT 0,
    input_tokens        BIGINT  NOT NULL DEFAULT 0,
    output_tokens       BIGINT  NOT NULL DEFAULT 0,
    cache_read_tokens   BIGINT  NOT NULL DEFAULT 0,
    cache_write_tokens  BIGINT  NOT NULL DEFAULT 0,
    cost_usd            DOUBLE PRECISION NOT NULL DEFAULT 0,
    result              TEXT,
    error               TEXT,
    cancel_requested_at BIGINT,
    created_at          BIGINT  NOT NULL,
    updated_at          BIGINT  NOT NULL,
    started_at          BIGINT,
    finished_at         BIGINT
);
CREATE INDEX runs_status ON runs (status, created_at);
CREATE INDEX runs_concurrency_key ON runs (concurrency_key) WHERE concurrency_key IS NOT NULL;

-- A job: one unit of queued work for a run. An identity column, so an id is never reused.
CREATE TABLE jobs (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id              TEXT    NOT NULL REFERENCES runs (id),
    kind                TEXT    NOT NULL CHECK (kind IN ('start', 'resume')),
    lane                TEXT    NOT NULL,
    priority            BIGINT  NOT NULL DEFAULT 0,
    payload             TEXT    NOT NULL,
    run_at              BIGINT  NOT NULL,
    attempts            BIGINT  NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts        BIGINT  NOT NULL CHECK (max_attempts >= 1),
    dedupe_key          TEXT    UNIQUE,
    status              TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'succeeded',
                            'parked', 'dead', 'cancelled')),
    lease_owner         TEXT,
    -- The fencing token: grows by one on every claim. Every write a worker makes is
    -- conditional on the token it was issued.
    lease_token         BIGINT  NOT NULL DEFAULT 0,
    lease_expires_at    BIGINT,
    cancel_requested_at BIGINT,
    last_error          TEXT,
    created_at          BIGINT  NOT NULL,
    updated_at          BIGINT  NOT NULL,
    finished_at         BIGINT
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
    seq         BIGINT  NOT NULL CHECK (seq >= 1),
    job_id      BIGINT  NOT NULL,
    lease_token BIGINT  NOT NULL,
    type        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Gzipped snapshots of a run's projected state, covering events up to through_seq.
CREATE TABLE checkpoints (
    run_id         TEXT    NOT NULL REFERENCES runs (id),
    through_seq    BIGINT  NOT NULL CHECK (through_seq >= 0),
    format_version BIGINT  NOT NULL CHECK (format_version >= 1),
    body           BYTEA   NOT NULL,
    size_bytes     BIGINT  NOT NULL,
    job_id         BIGINT  NOT NULL,
    lease_token    BIGINT  NOT NULL,
    created_at     BIGINT  NOT NULL,
    PRIMARY KEY (run_id, through_seq)
);

-- Worker processes, for operators: who holds leases and when each was last heard from.
CREATE TABLE workers (
    id                TEXT    PRIMARY KEY,
    host              TEXT    NOT NULL,
    pid               BIGINT  NOT NULL,
    started_at        BIGINT  NOT NULL,
    last_heartbeat_at BIGINT  NOT NULL
);
