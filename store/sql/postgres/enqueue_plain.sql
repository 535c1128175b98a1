-- A run without a concurrency key and its start job, in one statement (one round trip, atomic
-- on its own), waking idle workers on commit. No row back means the idempotency key was
-- taken. $1 run id, $2 agent, $3 trigger_kind, $4 input, $5 idempotency_key, $6 now,
-- $7 lane, $8 priority, $9 run_at, $10 max_attempts, $11 channel, $12 notify,
-- $13 trace_parent, $14 context
WITH run AS (
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, notify,
                      trace_parent, context, created_at, updated_at)
    VALUES ($1, $2, 'queued', $3, $4, $5, $12, $13, $14, $6, $6)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
), job AS (
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at)
    SELECT run.id, 'start', $7, $8, $4, $9, $10, 'queued', $6, $6 FROM run
    RETURNING id
)
SELECT job.id FROM job, LATERAL (SELECT pg_notify($11, $7)) AS woken
