-- Claims up to ?3 due deliveries: counts the attempt, issues a fresh claim token and pushes
-- next_attempt_at out by the lease, so a claim whose daemon dies comes due again by itself.
-- ?1 now, ?2 lease (ms)
UPDATE notifications SET
    attempts = attempts + 1,
    claim_token = claim_token + 1,
    next_attempt_at = ?1 + ?2,
    updated_at = ?1
WHERE id IN (
    SELECT id FROM notifications
    WHERE status = 'pending' AND next_attempt_at <= ?1 AND attempts < max_attempts
    ORDER BY next_attempt_at, id
    LIMIT ?3)
RETURNING *
