-- Claim up to ?5 due jobs of the one lane ?4 (a lane name) in claim order, issuing each a
-- fresh lease token: what a pool asks for its reserved slots. Jobs whose concurrency key is
-- held by a running job wait. ?1 now, ?2 worker id, ?3 lease length (ms).
--
-- claim.sql's skip scan over the priorities (which it says why), within the lane:
-- INDEXED BY holds SQLite to jobs_claim_lane, whose first column is the lane, so the claim
-- reads that lane's jobs only, however many of other lanes are queued.
WITH RECURSIVE priorities(priority) AS (
    SELECT priority FROM (
        SELECT priority FROM jobs INDEXED BY jobs_claim_lane
        WHERE status = 'queued' AND lane = ?4 ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM jobs j INDEXED BY jobs_claim_lane
            WHERE j.status = 'queued' AND j.lane = ?4 AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM priorities p WHERE p.priority IS NOT NULL
)
UPDATE jobs SET
    status = 'running',
    attempts = attempts + 1,
    lease_token = lease_token + 1,
    lease_owner = ?2,
    lease_expires_at = ?1 + ?3,
    updated_at = ?1
WHERE id IN (
    SELECT q.id FROM priorities p CROSS JOIN jobs q INDEXED BY jobs_claim_lane
    WHERE q.status = 'queued'
      AND q.lane = ?4
      AND q.priority = p.priority
      AND q.run_at <= ?1
      AND (q.concurrency_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobs h
            WHERE h.concurrency_key = q.concurrency_key AND h.status = 'running'))
    LIMIT ?5)
RETURNING *
