-- $1 run_id, $2 kind, $3 lane, $4 priority, $5 payload, $6 run_at, $7 max_attempts,
-- $8 dedupe_key, $9 now
-- The job inherits its run's concurrency key.
INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, dedupe_key,
                  status, created_at, updated_at, concurrency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'queued', $9, $9,
        (SELECT r.concurrency_key FROM runs r WHERE r.id = $1))
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id
