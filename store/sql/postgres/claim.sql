-- Claim up to $5 due jobs in claim order, optionally only from the lanes in the JSON array $4,
-- issuing each a fresh lease token. Rows locked by a concurrent claimer are skipped, never
-- waited for. Jobs whose concurrency key is held by a running job wait (claim re-checks under
-- a lock on the key, see try_lock_key.sql). The runs of claimed jobs without a concurrency
-- key are marked running here too (such a job is always kept, so one round trip does both);
-- a keyed job's run is marked only once claim has made sure it holds the key
-- (mark_runs_running.sql). $1 now, $2 worker id, $3 lease length (ms).
-- Rows are written through their primary key (`id = ANY(…)`), as settle.sql says why.
--
-- Due jobs are found by a skip scan of jobs_claim, one priority at a time (`priorities`
-- lists the queued jobs' distinct priorities, highest first, one index probe each, and only
-- as far as the claim needs): within a priority the due jobs are a range of the index
-- (`run_at <= $1`) that the scan leaves at the first job not yet due. A walk of the whole
-- index in claim order would pass every job that sleeps until later (armed wakeups,
-- retries, delayed runs) on each claim that finds fewer due jobs than it may take. Rows come
-- out in claim order: the priorities in order, each one's jobs in index order; the limit
-- applies to rows already locked, so a job another claimer holds is skipped, never counted.
WITH RECURSIVE priorities AS (
    (SELECT priority FROM jobs WHERE status = 'queued' ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM jobs j
            WHERE j.status = 'queued' AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM priorities p WHERE p.priority IS NOT NULL
), picked AS (
    SELECT due.id FROM priorities p CROSS JOIN LATERAL (
        SELECT id FROM jobs q
        WHERE status = 'queued'
          AND priority = p.priority
          AND run_at <= $1
          AND ($4::text IS NULL OR lane IN (SELECT jsonb_array_elements_text($4::jsonb)))
          AND (q.concurrency_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM jobs h
                WHERE h.concurrency_key = q.concurrency_key AND h.status = 'running'))
        ORDER BY run_at, id
        LIMIT $5
        FOR UPDATE SKIP LOCKED
    ) due
    LIMIT $5
), claimed AS (
    UPDATE jobs j SET
        status = 'running',
        attempts = j.attempts + 1,
        lease_token = j.lease_token + 1,
        lease_owner = $2,
        lease_expires_at = $1 + $3,
        updated_at = $1
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.*
), marked AS (
    UPDATE runs r SET status = 'running', started_at = COALESCE(r.started_at, $1), updated_at = $1
    WHERE r.id = ANY(ARRAY(SELECT run_id FROM claimed WHERE concurrency_key IS NULL))
      -- IS TRUE: found by id, never through runs_status (see mark_runs_running.sql).
      AND (r.status IN ({idle_run_states})) IS TRUE
)
SELECT * FROM claimed
