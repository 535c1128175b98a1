-- A run that decides nothing (no concurrency key, or one whose policy is `queue`) and its start
-- job, in one statement (the INSTEAD OF trigger of view enqueue_start, migrations 10 and 17:
-- atomic on its own, no transaction to leave open), then the job's id, in one round trip. No
-- row back means the idempotency key was taken.
-- ?1 run id, ?2 agent, ?3 trigger_kind, ?4 input, ?5 idempotency_key, ?6 now, ?7 lane,
-- ?8 priority, ?9 run_at, ?10 max_attempts, ?11 notify, ?12 trace_parent, ?13 context,
-- ?14 concurrency_key
INSERT INTO enqueue_start (run_id, agent, trigger_kind, input, idempotency_key, now, lane,
                           priority, run_at, max_attempts, notify, trace_parent, context,
                           concurrency_key)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14);
SELECT id FROM jobs WHERE run_id = ?1 AND kind = 'start' ORDER BY id LIMIT 1
