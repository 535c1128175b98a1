-- A fork's first own event, written with the fork (no lease holds the run yet): its seq
-- follows the parent's events it shares. $1 run id, $2 seq, $3 the fork's start job, $4 type,
-- $5 the payload's blob, $6 now
INSERT INTO run_events (run_id, seq, job_id, lease_token, type, payload, blob_id, created_at)
VALUES ($1, $2, $3, 0, $4, '', $5, $6)
