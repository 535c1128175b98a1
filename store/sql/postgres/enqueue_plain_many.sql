-- Runs that decide nothing (no concurrency key, or one whose policy is `queue`) and their
-- start jobs, in one statement (one round trip, atomic on its own): the parallel arrays $1-$12
-- and $14 hold one run each, in order; $13 is now (the first run's: a group-committed batch
-- stamps every run's created_at with it).
-- Returns (run id, start job id) for every run inserted; a run missing from the answer lost
-- its idempotency key to an earlier run (of this batch too: the first in array order wins).
-- $1 run ids, $2 agents, $3 trigger kinds, $4 inputs, $5 idempotency keys, $6 lanes,
-- $7 priorities, $8 run_at, $9 max_attempts, $10 notify, $11 trace parents, $12 contexts,
-- $14 concurrency keys
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bool[],
                         $11::text[], $12::text[], $14::text[]) WITH ORDINALITY
        AS i(id, agent, trigger_kind, input, idempotency_key, lane, priority, run_at,
             max_attempts, notify, trace_parent, context, concurrency_key, ord)
), run AS (
    INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, concurrency_key,
                      notify, trace_parent, context, created_at, updated_at)
    SELECT id, agent, 'queued', trigger_kind, input, idempotency_key, concurrency_key, notify,
           trace_parent, context, $13, $13
    FROM input ORDER BY ord
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
), job AS (
    INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, status,
                      created_at, updated_at, concurrency_key)
    SELECT i.id, 'start', i.lane, i.priority, i.input, i.run_at, i.max_attempts, 'queued',
           $13, $13, i.concurrency_key
    FROM input i JOIN run r ON r.id = i.id
    ORDER BY i.ord
    RETURNING id, run_id
)
SELECT run_id, id FROM job
