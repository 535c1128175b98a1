-- Marks the runs of claimed jobs running, in one statement. ?1 now, ?2 a JSON array of run
-- ids. The unary + keeps SQLite from looking the runs up by status (runs_status), which
-- would visit every queued run: each is found by its id.
UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?1), updated_at = ?1
WHERE id IN (SELECT value FROM json_each(?2))
  AND +status IN ({idle_run_states})
