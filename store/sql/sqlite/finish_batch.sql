-- Ends several leased attempts, their jobs and their runs, in two statements sent together
-- (one round trip to the connection's thread), each fenced by its own lease token. ?1 is a
-- JSON array with one entry per end: [job id, lease token, new job state, job last_error or
-- null (keeps it), run status, run result or null, run error or null] (null keeps the
-- column); ?2 now.
--
-- First the runs, of the entries whose job is still running under the entry's token: the
-- jobs the second statement ends, as nothing writes between the two. A run is ended once, by
-- its first such entry in the array's order, and a terminal run is left alone (as in
-- set_run_status.sql).
UPDATE runs SET
    status = e.status,
    result = COALESCE(e.result, runs.result),
    error = COALESCE(e.error, runs.error),
    finished_at = ?2,
    updated_at = ?2
FROM (
    SELECT run_id, status, result, error FROM (
        SELECT jobs.run_id AS run_id,
               json_extract(l.value, '$[4]') AS status,
               json_extract(l.value, '$[5]') AS result,
               json_extract(l.value, '$[6]') AS error,
               row_number() OVER (PARTITION BY jobs.run_id ORDER BY l.key) AS nth
        FROM json_each(?1) AS l
        JOIN jobs ON jobs.id = json_extract(l.value, '$[0]')
                 AND jobs.lease_token = json_extract(l.value, '$[1]')
                 AND jobs.status = 'running'
    ) WHERE nth = 1
) AS e
WHERE runs.id = e.run_id
  AND runs.status NOT IN ({terminal_run_states});
-- Then the jobs. A job whose lease was lost matches no row, so nothing of it changes. Returns
-- the jobs that did end, with their tokens (a batch may hold a stale and a fresh end of one
-- job).
UPDATE jobs SET
    status = e.job_state,
    last_error = COALESCE(e.job_error, jobs.last_error),
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = ?2,
    updated_at = ?2
FROM (
    SELECT json_extract(value, '$[0]') AS id,
           json_extract(value, '$[1]') AS token,
           json_extract(value, '$[2]') AS job_state,
           json_extract(value, '$[3]') AS job_error
    FROM json_each(?1)
) AS e
WHERE jobs.id = e.id AND jobs.lease_token = e.token AND jobs.status = 'running'
RETURNING id, lease_token, concurrency_key IS NOT NULL AS keyed
