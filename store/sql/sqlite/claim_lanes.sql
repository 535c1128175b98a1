-- Claim up to ?5 due jobs of the lanes in the JSON array ?4, in claim order, issuing each a
-- fresh lease token. Jobs whose concurrency key is held by a running job wait. ?1 now,
-- ?2 worker id, ?3 lease length (ms). (claim.sql claims from every lane, claim_lane.sql from
-- one: that walks its index in order; with several lanes this sorts their queued jobs.)
UPDATE jobs SET
    status = 'running',
    attempts = attempts + 1,
    lease_token = lease_token + 1,
    lease_owner = ?2,
    lease_expires_at = ?1 + ?3,
    updated_at = ?1
WHERE id IN (
    SELECT id FROM jobs q
    WHERE status = 'queued'
      AND run_at <= ?1
      AND lane IN (SELECT value FROM json_each(?4))
      AND (q.concurrency_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobs h
            WHERE h.concurrency_key = q.concurrency_key AND h.status = 'running'))
    ORDER BY priority DESC, run_at, id
    LIMIT ?5)
RETURNING *
