-- Claim up to ?5 due jobs of the one lane ?4 (a lane name) in claim order, issuing each a
-- fresh lease token: what a pool asks for its reserved slots. Jobs whose concurrency key is
-- held by a running job wait. ?1 now, ?2 worker id, ?3 lease length (ms).
--
-- INDEXED BY holds SQLite to the walk of jobs_claim_lane in claim order within the lane, which
-- stops after ?5 jobs, however many of the lane's jobs are queued (claim.sql says why).
UPDATE jobs SET
    status = 'running',
    attempts = attempts + 1,
    lease_token = lease_token + 1,
    lease_owner = ?2,
    lease_expires_at = ?1 + ?3,
    updated_at = ?1
WHERE id IN (
    SELECT id FROM jobs q INDEXED BY jobs_claim_lane
    WHERE status = 'queued'
      AND lane = ?4
      AND run_at <= ?1
      AND (q.concurrency_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobs h
            WHERE h.concurrency_key = q.concurrency_key AND h.status = 'running'))
    ORDER BY priority DESC, run_at, id
    LIMIT ?5)
RETURNING *
