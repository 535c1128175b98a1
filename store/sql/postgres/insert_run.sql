-- $1 id, $2 agent, $3 trigger_kind, $4 input, $5 idempotency_key, $6 concurrency_key, $7 now,
-- $8 notify, $9 trace_parent, $10 context
INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, concurrency_key,
                  notify, trace_parent, context, created_at, updated_at)
VALUES ($1, $2, 'queued', $3, $4, $5, $6, $8, $9, $10, $7, $7)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id
