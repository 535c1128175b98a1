-- A run that decides nothing (no concurrency key, or one whose policy is `queue`) and its start
-- job, in one statement (one round trip, atomic on its own). No row back means the idempotency
-- key was taken. Other daemons are told after the commit (announce.rs), never by a NOTIFY
-- here. $1 run id, $2 agent, $3 trigger_kind, $4 input, $5 idempotency_key, $6 now, $7 lane,
-- $8 priority, $9 run_at, $10 max_attempts, $11 notify, $12 trace_parent, $13 context,
-- $14 concurrency_key
WITH run AS (
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, concurrency_key,
                      notify, trace_parent, context, created_at, updated_at)
    VALUES ($1, $2, 'queued', $3, $4, $5, $14, $11, $12, $13, $6, $6)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
), job AS (
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at, concurrency_key)
    SELECT run.id, 'start', $7, $8, $4, $9, $10, 'queued', $6, $6, $14 FROM run
    RETURNING id
)
SELECT job.id FROM job
