-- Records the outcome of a claimed attempt, only while the claim is current.
-- ?1 id, ?2 claim token, ?3 status, ?4 next_attempt_at (NULL keeps it), ?5 error (NULL keeps
-- the previous one), ?6 HTTP status (NULL keeps it), ?7 delivered_at, ?8 now
UPDATE notifications SET
    status = ?3,
    next_attempt_at = COALESCE(?4, next_attempt_at),
    last_error = COALESCE(?5, last_error),
    last_status_code = COALESCE(?6, last_status_code),
    delivered_at = ?7,
    updated_at = ?8
WHERE id = ?1 AND claim_token = ?2 AND status = 'pending'
RETURNING id
