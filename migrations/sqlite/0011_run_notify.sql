-- Nightshift schema v11 (SQLite): only runs that notify write an outbox row. Kept in lockstep
-- with migrations/postgres/0011_run_notify.sql, which says why.
--
-- runs.notify says whether the run's end is a notice for its agent's notify URLs; the store
-- sets it at enqueue. Runs that were already there keep notifying (the default). The outbox
-- trigger gains the test, and the enqueue view of version 10 gains the column.
ALTER TABLE runs ADD COLUMN notify BOOLEAN NOT NULL DEFAULT TRUE;

DROP TRIGGER run_outbox_on_terminal;
CREATE TRIGGER run_outbox_on_terminal AFTER UPDATE OF status ON runs
WHEN NEW.notify
 AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'budget_exhausted', 'max_rounds',
                    'superseded')
 AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled', 'budget_exhausted', 'max_rounds',
                        'superseded')
BEGIN
    INSERT INTO run_outbox (run_id, status, created_at)
    VALUES (NEW.id, NEW.status, COALESCE(NEW.finished_at, NEW.updated_at));
END;

-- Dropping the view drops its INSTEAD OF trigger; both come back with the new column. The
-- trigger's two INSERTs must still write what insert_run.sql and insert_job.sql write for a
-- run without a concurrency key (see version 10). An INSERT that names no `notify` (a
-- daemon of version 10 still running on the file while a newer one migrated it) gets TRUE,
-- as the column's default gives on the other paths.
DROP VIEW enqueue_start;
CREATE VIEW enqueue_start AS
SELECT NULL AS run_id, NULL AS agent, NULL AS trigger_kind, NULL AS input,
       NULL AS idempotency_key, NULL AS now, NULL AS lane, NULL AS priority, NULL AS run_at,
       NULL AS max_attempts, NULL AS notify
WHERE 0;

CREATE TRIGGER enqueue_start_insert INSTEAD OF INSERT ON enqueue_start
BEGIN
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, notify,
                      created_at, updated_at)
    VALUES (NEW.run_id, NEW.agent, 'queued', NEW.trigger_kind, NEW.input, NEW.idempotency_key,
            COALESCE(NEW.notify, TRUE), NEW.now, NEW.now)
    ON CONFLICT (idempotency_key) DO NOTHING;
    -- changes() counts the rows of the INSERT just above: none when the key was taken.
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at)
    SELECT NEW.run_id, 'start', NEW.lane, NEW.priority, NEW.input, NEW.run_at,
           NEW.max_attempts, 'queued', NEW.now, NEW.now
    WHERE changes() = 1;
END;
