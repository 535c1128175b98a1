-- Like append_event.sql, but refused (no row) once cancellation or supersession of the run was
-- requested: the output fence in front of side-effect tools.
-- Appends the run's next event only while the writer's lease token is current; one statement,
-- so the check and the write are atomic. ?1 job id, ?2 token, ?3 type, ?4 the payload's blob
-- (store/src/content/), ?5 now
INSERT INTO run_events (run_id, seq, job_id, lease_token, type, payload, blob_id, created_at)
SELECT j.run_id,
       COALESCE((SELECT MAX(e.seq) FROM run_events e WHERE e.run_id = j.run_id), 0) + 1,
       j.id, j.lease_token, ?3, '', ?4, ?5
FROM jobs j
WHERE j.id = ?1 AND j.lease_token = ?2 AND j.status = 'running' AND j.cancel_requested_at IS NULL
RETURNING seq
