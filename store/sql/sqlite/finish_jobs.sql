-- Ends several leased attempts in one statement (one round trip), each fenced by its own
-- token. ?1 is a JSON array with one entry per job, [job id, lease token, new job state,
-- job last_error or null (keeps it)]; ?2 now. A job whose lease was lost matches no row, so
-- nothing of it changes. Returns the jobs that did end, with their tokens (a batch may hold a
-- stale and a fresh end of one job); their runs are ended by end_runs.sql.
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
RETURNING id, lease_token, run_id, concurrency_key IS NOT NULL AS keyed
