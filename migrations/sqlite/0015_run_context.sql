-- Nightshift schema v15 (SQLite): what a run knows about what started it. Kept in lockstep
-- with migrations/postgres/0015_run_context.sql, which says what it holds.
ALTER TABLE runs ADD COLUMN context TEXT;

-- The enqueue view of version 14 gains the column (dropping the view drops its INSTEAD OF
-- trigger; both come back). An INSERT that names no `context` (an older daemon still running
-- on the file) gets NULL, as the other paths do.
DROP VIEW enqueue_start;
CREATE VIEW enqueue_start AS
SELECT NULL AS run_id, NULL AS agent, NULL AS trigger_kind, NULL AS input,
       NULL AS idempotency_key, NULL AS now, NULL AS lane, NULL AS priority, NULL AS run_at,
       NULL AS max_attempts, NULL AS notify, NULL AS trace_parent,
       NULL AS context
WHERE 0;

CREATE TRIGGER enqueue_start_insert INSTEAD OF INSERT ON enqueue_start
BEGIN
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, notify,
                      trace_parent, context, created_at, updated_at)
    VALUES (NEW.run_id, NEW.agent, 'queued', NEW.trigger_kind, NEW.input, NEW.idempotency_key,
            COALESCE(NEW.notify, TRUE), NEW.trace_parent, NEW.context, NEW.now, NEW.now)
    ON CONFLICT (idempotency_key) DO NOTHING;
    -- changes() counts the rows of the INSERT just above: none when the key was taken.
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at)
    SELECT NEW.run_id, 'start', NEW.lane, NEW.priority, NEW.input, NEW.run_at,
           NEW.max_attempts, 'queued', NEW.now, NEW.now
    WHERE changes() = 1;
END;
