-- Claims up to $3 due deliveries: counts the attempt, issues a fresh claim token and pushes
-- next_attempt_at out by the lease, so a claim whose daemon dies comes due again by itself.
-- Rows another daemon is claiming are skipped. $1 now, $2 lease (ms)
WITH picked AS (
    SELECT id FROM notifications
    WHERE status = 'pending' AND next_attempt_at <= $1 AND attempts < max_attempts
    ORDER BY next_attempt_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE notifications n SET
    attempts = n.attempts + 1,
    claim_token = n.claim_token + 1,
    next_attempt_at = $1 + $2,
    updated_at = $1
FROM picked
WHERE n.id = picked.id
RETURNING n.*
