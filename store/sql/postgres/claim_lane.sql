-- Claim up to $5 due jobs of the one lane $4 (a lane name) in claim order: what a pool asks
-- for its reserved slots. Otherwise as claim.sql (which says what else it does). $1 now, $2
-- worker id, $3 lease length (ms).
--
-- A statement of its own so that the lane is an equality on jobs_claim_lane's first column:
-- the claim then reads that index within the lane only, however many jobs of other lanes are
-- queued ahead (a burst in a batch lane). Through claim.sql's JSON list the lane is a filter,
-- and the scan of jobs_claim would pass every due job of the burst. Within the lane, the skip
-- scan over its priorities is claim.sql's (which says why).
WITH RECURSIVE priorities AS (
    (SELECT priority FROM jobs WHERE status = 'queued' AND lane = $4
     ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM jobs j
            WHERE j.status = 'queued' AND j.lane = $4 AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM priorities p WHERE p.priority IS NOT NULL
), picked AS (
    SELECT due.id FROM priorities p CROSS JOIN LATERAL (
        SELECT id FROM jobs q
        WHERE status = 'queued'
          AND lane = $4
          AND priority = p.priority
          AND run_at <= $1
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
