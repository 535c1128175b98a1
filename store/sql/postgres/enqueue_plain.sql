-- A run without a concurrency key and its start job, in one statement (one round trip, atomic
-- on its own). No row back means the idempotency key was taken. Other daemons are told after
-- the commit (announce.rs), never by a NOTIFY here. $1 run id, $2 agent, $3 trigger_kind,
-- $4 input, $5 idempotency_key, $6 now, $7 lane, $8 priority, $9 run_at, $10 max_attempts,
-- $11 notify, $12 trace_parent, $13 context
WITH run AS (
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, notify,
                      trace_parent, context, created_at, updated_at)
    VALUES ($1, $2, 'queued', $3, $4, $5, $11, $12, $13, $6, $6)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
), job AS (
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at)
    SELECT run.id, 'start', $7, $8, $4, $9, $10, 'queued', $6, $6 FROM run
    RETURNING id
)
SELECT job.id FROM job
