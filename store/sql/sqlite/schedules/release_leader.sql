-- Gives up lease ?1 if holder ?2 still holds it: it expires now (?3), so a standby takes
-- over at its next try. The row stays, so the epoch keeps growing.
UPDATE leader_leases SET expires_at = ?3
WHERE name = ?1 AND holder = ?2 AND expires_at > ?3
RETURNING epoch
