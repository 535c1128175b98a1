-- Ends an unfinished run as superseded; its worker (if any) is asked to stop.
-- $1 run id, $2 error, $3 now
UPDATE runs SET status = 'superseded', error = $2, finished_at = $3,
    cancel_requested_at = COALESCE(cancel_requested_at, $3), updated_at = $3
WHERE id = $1 AND status IN ({live_run_states})
RETURNING id
