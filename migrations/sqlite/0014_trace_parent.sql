-- Nightshift schema v14 (SQLite): the W3C traceparent a run was started with. Kept in lockstep
-- with migrations/postgres/0014_trace_parent.sql.
--
-- A webhook delivery or API request that carries `traceparent` starts a run that continues
-- the sender's trace: every job of the run, on any daemon, parents its span under the run
-- span of that trace (nightshift_telemetry::traces::RunTrace). NULL: the run's trace is its
-- own (its id is the run's id). Only a valid, normalised header is stored.
ALTER TABLE runs ADD COLUMN trace_parent TEXT;

-- The enqueue view of version 11 gains the column. Dropping the view drops its INSTEAD OF
-- trigger; both come back. The trigger's two INSERTs must still write what insert_run.sql
-- and insert_job.sql write for a run without a concurrency key (see version 10). An INSERT
-- that names no `notify` or `trace_parent` (a daemon of an older version still running on the
-- file) gets TRUE and NULL, as the other paths do.
DROP VIEW enqueue_start;
CREATE VIEW enqueue_start AS
SELECT NULL AS run_id, NULL AS agent, NULL AS trigger_kind, NULL AS input,
       NULL AS idempotency_key, NULL AS now, NULL AS lane, NULL AS priority, NULL AS run_at,
       NULL AS max_attempts, NULL AS notify, NULL AS trace_parent
WHERE 0;

CREATE TRIGGER enqueue_start_insert INSTEAD OF INSERT ON enqueue_start
BEGIN
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, notify,
                      trace_parent, created_at, updated_at)
    VALUES (NEW.run_id, NEW.agent, 'queued', NEW.trigger_kind, NEW.input, NEW.idempotency_key,
            COALESCE(NEW.notify, TRUE), NEW.trace_parent, NEW.now, NEW.now)
    ON CONFLICT (idempotency_key) DO NOTHING;
    -- changes() counts the rows of the INSERT just above: none when the key was taken.
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at)
    SELECT NEW.run_id, 'start', NEW.lane, NEW.priority, NEW.input, NEW.run_at,
           NEW.max_attempts, 'queued', NEW.now, NEW.now
    WHERE changes() = 1;
END;
