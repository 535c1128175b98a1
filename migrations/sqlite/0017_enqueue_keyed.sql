-- Nightshift schema v17 (SQLite): the enqueue view carries a concurrency key. Kept in lockstep
-- with migrations/postgres/0017_enqueue_keyed.sql.
--
-- A run whose key has the `queue` policy decides nothing from the key's other runs (the queue
-- holds its job while another job of the key runs), so it is enqueued as a run without a key
-- is: one statement, one round trip (store/sql/sqlite/enqueue_plain.sql), with the key on the
-- run and on its start job. The other policies still read the key's runs in a transaction.
-- An INSERT that names no `concurrency_key` (an older daemon still running on the file) gets
-- NULL, as before.
DROP VIEW enqueue_start;
CREATE VIEW enqueue_start AS
SELECT NULL AS run_id, NULL AS agent, NULL AS trigger_kind, NULL AS input,
       NULL AS idempotency_key, NULL AS now, NULL AS lane, NULL AS priority, NULL AS run_at,
       NULL AS max_attempts, NULL AS notify, NULL AS trace_parent,
       NULL AS context, NULL AS concurrency_key
WHERE 0;

CREATE TRIGGER enqueue_start_insert INSTEAD OF INSERT ON enqueue_start
BEGIN
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, concurrency_key,
                      notify, trace_parent, context, created_at, updated_at)
    VALUES (NEW.run_id, NEW.agent, 'queued', NEW.trigger_kind, NEW.input, NEW.idempotency_key,
            NEW.concurrency_key, COALESCE(NEW.notify, TRUE), NEW.trace_parent, NEW.context,
            NEW.now, NEW.now)
    ON CONFLICT (idempotency_key) DO NOTHING;
    -- changes() counts the rows of the INSERT just above: none when the key was taken.
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at, concurrency_key)
    SELECT NEW.run_id, 'start', NEW.lane, NEW.priority, NEW.input, NEW.run_at,
           NEW.max_attempts, 'queued', NEW.now, NEW.now, NEW.concurrency_key
    WHERE changes() = 1;
END;
