-- Moves a run that is not yet terminal. $1 run id, $2 status, $3 result, $4 error,
-- $5 finished_at, $6 now
UPDATE runs SET
    status = $2,
    result = COALESCE($3, result),
    error = COALESCE($4, error),
    finished_at = COALESCE($5, finished_at),
    updated_at = $6
WHERE id = $1
  AND status NOT IN ({terminal_run_states})
