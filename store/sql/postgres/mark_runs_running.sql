-- Marks the runs of claimed jobs running, in one statement. $1 now, $2 the run ids.
-- `(…) IS TRUE` keeps the planner from looking the runs up by status (runs_status), which
-- would visit every queued run when its statistics say there are few: each is found by id.
UPDATE runs r SET status = 'running', started_at = COALESCE(r.started_at, $1), updated_at = $1
WHERE r.id = ANY($2::text[])
  AND (r.status IN ({idle_run_states})) IS TRUE
