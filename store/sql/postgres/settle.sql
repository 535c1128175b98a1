-- The one-statement settle (one round trip, atomic on its own, no explicit transaction):
-- ends the jobs in the parallel arrays $1-$7 exactly as finish_jobs.sql does (each fenced by
-- its own token), and claims up to $11 due jobs of any lane as claim.sql does (runs marked
-- running), for worker $9 with a lease of $10 ms. (A claim for given lanes takes the
-- transactional path, whose claim_lane.sql walks jobs_claim_lane.) $8 now. When an ended job
-- held a concurrency key (jobs waiting for the key may run now), ended_keyed says so and the
-- store announces it after this statement (announce.rs).
--
-- It claims only when none of the jobs it would take has a concurrency key: such a claim
-- needs the key lock and re-check of the transactional path (try_lock_key.sql,
-- key_holder.sql). Then it claims nothing, returns how many keyed jobs it saw, and the
-- caller claims again on that path; the ends are written either way.
--
-- Always one row or more: the summary of the ends (the ids and tokens of the ends that won:
-- a batch may hold a stale and a fresh end of one job; whether any had a key) and
-- the number of keyed jobs seen, joined with each claimed job (NULL job columns when none).
--
-- Every row it writes is reached through its primary key: `id = ANY(…)` gives the planner an
-- index condition on the key whatever it estimates, where a join on the id let it scan the
-- whole table when its statistics made that look cheap (with 2,000 jobs analyzed: a
-- sequential scan of jobs and one of runs in every settle). The ends are materialized, so a
-- plan that reads them once per job reads a list, never unnests the seven arrays again. The
-- ended runs are found by `id = ANY(…)` alone, their new values read from `done` by a
-- subquery, not joined to it: a join on the run's id as an index condition got, on tables the
-- planner thought tiny (never analyzed, or a few hundred rows), a walk of a listing index of
-- runs (they end with the id) per ended run, and as a join filter a nested loop that read the
-- runs once per ended job (256 ends: 0.75 s). `(j.status = 'running') IS TRUE` keeps the ends
-- off jobs_lease_expiry, which holds every running job. So the generic plan is right for any
-- statistics, and the warm connection uses it (see WARM_SETTINGS; on tables analyzed while
-- empty every index costs the same to the planner, and the warm connection remakes its plans
-- as the tables grow: warm.rs).
WITH RECURSIVE priorities AS (
    -- The skip scan of claim.sql (which says why), over every lane.
    (SELECT priority FROM jobs WHERE status = 'queued' ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM jobs j
            WHERE j.status = 'queued' AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM priorities p WHERE p.priority IS NOT NULL
), ends AS MATERIALIZED (
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
), picked AS (
    SELECT due.id, due.concurrency_key FROM priorities p CROSS JOIN LATERAL (
        SELECT id, concurrency_key FROM jobs q
        WHERE status = 'queued'
          AND priority = p.priority
          AND run_at <= $8
          AND (q.concurrency_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM jobs h
                WHERE h.concurrency_key = q.concurrency_key AND h.status = 'running'))
        ORDER BY run_at, id
        LIMIT $11
        FOR UPDATE SKIP LOCKED
    ) due
    LIMIT $11
), plain AS (
    SELECT id FROM picked
    WHERE NOT EXISTS (SELECT 1 FROM picked k WHERE k.concurrency_key IS NOT NULL)
), claimed AS (
    UPDATE jobs j SET
        status = 'running',
        attempts = j.attempts + 1,
        lease_token = j.lease_token + 1,
        lease_owner = $9,
        lease_expires_at = $8 + $10,
        updated_at = $8
    WHERE j.id = ANY(ARRAY(SELECT id FROM plain))
    RETURNING j.*
), marked AS (
    UPDATE runs r SET status = 'running', started_at = COALESCE(r.started_at, $8), updated_at = $8
    WHERE r.id = ANY(ARRAY(SELECT run_id FROM claimed))
      -- IS TRUE: found by id, never through runs_status (see mark_runs_running.sql).
      AND (r.status IN ({idle_run_states})) IS TRUE
), summary AS (
    SELECT (SELECT array_agg(id) FROM done) AS ended_ids,
           (SELECT array_agg(lease_token) FROM done) AS ended_tokens,
           EXISTS (SELECT 1 FROM done WHERE concurrency_key IS NOT NULL) AS ended_keyed,
           (SELECT count(*) FROM picked WHERE concurrency_key IS NOT NULL) AS keyed_seen
)
SELECT s.ended_ids, s.ended_tokens, s.ended_keyed, s.keyed_seen, c.*
FROM summary s LEFT JOIN claimed c ON true
