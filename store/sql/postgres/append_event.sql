-- Appends the run's next event only while the writer's lease token is current. FOR SHARE
-- holds the job row until commit, so a concurrent claim cannot slip between the check and
-- the write. $1 job id, $2 token, $3 type, $4 the payload's blob
-- (store/src/content/), $5 now
INSERT INTO run_events (run_id, seq, job_id, lease_token, type, payload, blob_id, created_at)
SELECT j.run_id,
       COALESCE((SELECT MAX(e.seq) FROM run_events e WHERE e.run_id = j.run_id), 0) + 1,
       j.id, j.lease_token, $3, '', $4, $5
FROM (SELECT id, run_id, lease_token FROM jobs
      WHERE id = $1 AND lease_token = $2 AND status = 'running'
      FOR SHARE) j
RETURNING seq
