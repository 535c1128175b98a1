-- Claim up to ?5 due jobs of the lanes in the JSON array ?4, in claim order, issuing each a
-- fresh lease token. Jobs whose concurrency key is held by a running job wait. ?1 now,
-- ?2 worker id, ?3 lease length (ms). (claim.sql claims from every lane, claim_lane.sql from
-- one.)
--
-- claim.sql's skip scan over the priorities (which it says why), with the lanes as a filter:
-- within a priority it passes the due jobs of other lanes, never the jobs that are not due.
WITH RECURSIVE priorities(priority) AS (
    SELECT priority FROM (
        SELECT priority FROM jobs INDEXED BY jobs_claim
        WHERE status = 'queued' ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM jobs j INDEXED BY jobs_claim
            WHERE j.status = 'queued' AND j.priority < p.priority
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
    SELECT q.id FROM priorities p CROSS JOIN jobs q INDEXED BY jobs_claim
    WHERE q.status = 'queued'
      AND q.priority = p.priority
      AND q.run_at <= ?1
      AND q.lane IN (SELECT value FROM json_each(?4))
      AND (q.concurrency_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobs h
            WHERE h.concurrency_key = q.concurrency_key AND h.status = 'running'))
    LIMIT ?5)
RETURNING *
