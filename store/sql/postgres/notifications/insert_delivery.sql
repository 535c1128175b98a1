-- One delivery of an outbox row to one URL; a second for the same URL is ignored.
-- $1 delivery id, $2 outbox id, $3 url, $4 secret_env, $5 max_attempts, $6 now
INSERT INTO notifications (delivery_id, outbox_id, run_id, url, secret_env, status, attempts,
                           max_attempts, next_attempt_at, created_at, updated_at)
SELECT $1::text, o.id, o.run_id, $3::text, $4::text, 'pending', 0, $5::bigint, $6::bigint,
       $6::bigint, $6::bigint
FROM run_outbox o WHERE o.id = $2
ON CONFLICT (outbox_id, url) DO NOTHING
