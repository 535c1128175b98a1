-- Ends several leased attempts in one statement (one round trip), each fenced by its own
-- token, and ends each one's run as its own outcome says (a terminal run is left alone, as in
-- set_run_status.sql; a run has one live job, and were two of its jobs to end in one batch,
-- one of their ends would set it). A job whose lease was lost matches no row, so nothing of
-- it changes; the statement returns the jobs that did end, with their tokens (a batch may
-- hold a stale and a fresh end of one job). The arrays are parallel, one entry per job:
-- $1 job ids, $2 lease tokens, $3 new job states, $4 job last_error (NULL keeps it),
-- $5 run statuses, $6 run results, $7 run errors. $8 now.
-- Rows are written through their primary key (`id = ANY(…)`), the ends materialized and the
-- runs' values read by a subquery rather than a join, as settle.sql says why.
WITH ends AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::text[])
        AS e(id, token, job_state, job_error, run_status, run_result, run_error)
), done AS (
    UPDATE jobs j SET
        status = e.job_state,
        last_error = COALESCE(e.job_error, j.last_error),
        lease_owner = NULL,
        lease_expires_at = NULL,
        finished_at = $8,
        updated_at = $8
    FROM ends e
    WHERE j.id = ANY($1::bigint[]) AND j.id = e.id AND j.lease_token = e.token
      AND (j.status = 'running') IS TRUE
    RETURNING j.id, j.lease_token, j.run_id, j.concurrency_key, e.run_status, e.run_result,
              e.run_error
), ended AS (
    UPDATE runs r SET
        (status, result, error) = (
            SELECT d.run_status, COALESCE(d.run_result, r.result), COALESCE(d.run_error, r.error)
            FROM done d WHERE d.run_id = r.id LIMIT 1),
        finished_at = $8,
        updated_at = $8
    WHERE r.id = ANY(ARRAY(SELECT run_id FROM done))
      AND r.status NOT IN ({terminal_run_states})
)
SELECT id, lease_token, concurrency_key IS NOT NULL AS keyed FROM done
