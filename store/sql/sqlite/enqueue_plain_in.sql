-- Several runs that decide nothing and their start jobs, each as enqueue_plain.sql would, in
-- the caller's transaction: the view's trigger runs once per entry, in array order (so of two
-- entries with one idempotency key the first wins). ?1 is a JSON array with one entry per
-- run: [run id, agent, trigger_kind, input, idempotency_key, now, lane, priority, run_at,
-- max_attempts, notify, trace_parent, context, concurrency_key]. Then returns
-- (run id, start job id) for every run of the array that has a start job: a run missing from
-- the answer lost its idempotency key.
INSERT INTO enqueue_start (run_id, agent, trigger_kind, input, idempotency_key, now, lane,
                           priority, run_at, max_attempts, notify, trace_parent, context,
                           concurrency_key)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), json_extract(value, '$[7]'), json_extract(value, '$[8]'),
       json_extract(value, '$[9]'), json_extract(value, '$[10]'), json_extract(value, '$[11]'),
       json_extract(value, '$[12]'), json_extract(value, '$[13]')
FROM json_each(?1)
ORDER BY key;
SELECT j.run_id, j.id FROM jobs j
WHERE j.kind = 'start'
  AND j.run_id IN (SELECT json_extract(value, '$[0]') FROM json_each(?1))
