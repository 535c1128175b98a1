-- Nightshift schema v18 (SQLite): a claim marks the runs of the jobs it takes running in the
-- same statement, as PostgreSQL's claim does in its writing CTE (MARKS_PLAIN_RUNS), instead
-- of a second statement (mark_runs_running.sql) and with it a second round trip to the
-- connection's thread on every claim.
--
-- Only claims move a job from 'queued' to 'running'. A job with a concurrency key is left to
-- its claimer, which marks its run once the key is known to be free (a claim statement may
-- take two jobs of one key, and gives the second back). A run already running, or ended,
-- is left alone, as mark_runs_running.sql leaves it; as there, the unary + keeps SQLite from
-- looking the run up by status (runs_status, every queued run) instead of by its id.
CREATE TRIGGER claim_marks_run AFTER UPDATE OF status ON jobs
WHEN OLD.status = 'queued' AND NEW.status = 'running' AND NEW.concurrency_key IS NULL
BEGIN
    UPDATE runs SET status = 'running', started_at = COALESCE(started_at, NEW.updated_at),
                    updated_at = NEW.updated_at
    WHERE id = NEW.run_id AND +status IN ('queued', 'waiting', 'awaiting_approval');
END;
