-- Nightshift schema v10 (SQLite): a run without a concurrency key and its start job in one
-- statement. Kept in lockstep with migrations/postgres/0010_enqueue_start.sql.
--
-- PostgreSQL enqueues such a run with one statement (store/sql/postgres/enqueue_plain.sql, a
-- writing CTE). SQLite has no writing CTEs, so it took a transaction of four statements
-- (BEGIN IMMEDIATE, the run, the job, COMMIT), and each is a round trip to the thread sqlx
-- runs the connection on: measured, 535 us an enqueue, of which about 200 us were those
-- round trips. An INSERT into this view runs its INSTEAD OF trigger, which inserts both rows;
-- a statement is atomic on its own, so the run and its job are written together or not at
-- all, with no transaction left open if the caller goes away. store/sql/sqlite/enqueue_plain.sql
-- inserts here and reads the job's id back.
--
-- The view holds no rows; only its columns matter. The trigger's two INSERTs must write what
-- insert_run.sql and insert_job.sql write for a run without a concurrency key (the suite's
-- queue::both_enqueue_paths_write_the_same_rows compares them).
CREATE VIEW enqueue_start AS
SELECT NULL AS run_id, NULL AS agent, NULL AS trigger_kind, NULL AS input,
       NULL AS idempotency_key, NULL AS now, NULL AS lane, NULL AS priority, NULL AS run_at,
       NULL AS max_attempts
WHERE 0;

CREATE TRIGGER enqueue_start_insert INSTEAD OF INSERT ON enqueue_start
BEGIN
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, created_at,
                      updated_at)
    VALUES (NEW.run_id, NEW.agent, 'queued', NEW.trigger_kind, NEW.input, NEW.idempotency_key,
            NEW.now, NEW.now)
    ON CONFLICT (idempotency_key) DO NOTHING;
    -- changes() counts the rows of the INSERT just above: none when the key was taken.
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at)
    SELECT NEW.run_id, 'start', NEW.lane, NEW.priority, NEW.input, NEW.run_at,
           NEW.max_attempts, 'queued', NEW.now, NEW.now
    WHERE changes() = 1;
END;
