-- Extends the lease only while the token is current and no cancellation was requested.
-- ?1 job id, ?2 token, ?3 lease length (ms), ?4 now
UPDATE jobs SET lease_expires_at = ?4 + ?3, updated_at = ?4
WHERE id = ?1 AND lease_token = ?2 AND status = 'running' AND cancel_requested_at IS NULL
RETURNING lease_expires_at
