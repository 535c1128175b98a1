-- Ends the runs of the jobs finish_jobs.sql ended, each as its own outcome says; a terminal
-- run is left alone (as in set_run_status.sql). ?1 is a JSON array with one entry per run,
-- [run id, status, result or null, error or null] (null keeps the column); ?2 now.
UPDATE runs SET
    status = e.status,
    result = COALESCE(e.result, runs.result),
    error = COALESCE(e.error, runs.error),
    finished_at = ?2,
    updated_at = ?2
FROM (
    SELECT json_extract(value, '$[0]') AS run_id,
           json_extract(value, '$[1]') AS status,
           json_extract(value, '$[2]') AS result,
           json_extract(value, '$[3]') AS error
    FROM json_each(?1)
) AS e
WHERE runs.id = e.run_id
  AND runs.status NOT IN ('succeeded', 'failed', 'cancelled', 'budget_exhausted', 'max_rounds',
                          'superseded')
