-- Nightshift schema v5 (SQLite): run notifications. Kept in lockstep with
-- migrations/postgres/0005_notifications.sql. (Versions 3 and 4 are other features'.)
--
-- run_outbox: one row per run that reached a terminal state, written by a trigger in the same
-- transaction as the status change, whichever statement made it (complete, retry, lease
-- rescue, park, cancel, supersession). A terminal run never changes status again, so a run
-- has at most one row. `expanded_at` is set once the daemon has made the deliveries its
-- agent's config asks for.
CREATE TABLE run_outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT    NOT NULL REFERENCES runs (id),
    status      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    expanded_at INTEGER
);
CREATE INDEX run_outbox_run ON run_outbox (run_id);
CREATE INDEX run_outbox_unexpanded ON run_outbox (id) WHERE expanded_at IS NULL;

CREATE TRIGGER run_outbox_on_terminal AFTER UPDATE OF status ON runs
WHEN NEW.status IN ('succeeded', 'failed', 'cancelled', 'budget_exhausted', 'max_rounds',
                    'superseded')
 AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled', 'budget_exhausted', 'max_rounds',
                        'superseded')
BEGIN
    INSERT INTO run_outbox (run_id, status, created_at)
    VALUES (NEW.id, NEW.status, COALESCE(NEW.finished_at, NEW.updated_at));
END;

-- notifications: one delivery of one outbox row to one URL. `claim_token` grows on every
-- claim; a claim also pushes `next_attempt_at` out by the lease, so the row of a daemon that
-- died mid-delivery becomes due again by itself. `secret_env` is the NAME of the variable
-- holding the signing secret, never the secret.
CREATE TABLE notifications (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id      TEXT    NOT NULL UNIQUE,
    outbox_id        INTEGER NOT NULL REFERENCES run_outbox (id),
    run_id           TEXT    NOT NULL REFERENCES runs (id),
    url              TEXT    NOT NULL,
    secret_env       TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    next_attempt_at  INTEGER NOT NULL,
    claim_token      INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    last_status_code INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    delivered_at     INTEGER,
    UNIQUE (outbox_id, url)
);
CREATE INDEX notifications_due ON notifications (next_attempt_at) WHERE status = 'pending';
CREATE INDEX notifications_run ON notifications (run_id);
