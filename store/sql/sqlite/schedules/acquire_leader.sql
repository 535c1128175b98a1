-- Takes the lease ?1 for holder ?2 until ?3 + ?4, or renews it: one guarded upsert, so of
-- several daemons at most one holds it. The epoch grows when the lease changes hands (or
-- lapsed). No row when another holder's lease is still live.
INSERT INTO leader_leases (name, holder, epoch, acquired_at, expires_at)
VALUES (?1, ?2, 1, ?3, ?3 + ?4)
ON CONFLICT (name) DO UPDATE SET
    epoch = CASE WHEN leader_leases.holder = excluded.holder AND leader_leases.expires_at > ?3
                 THEN leader_leases.epoch ELSE leader_leases.epoch + 1 END,
    acquired_at = CASE WHEN leader_leases.holder = excluded.holder
                            AND leader_leases.expires_at > ?3
                       THEN leader_leases.acquired_at ELSE ?3 END,
    holder = excluded.holder,
    expires_at = excluded.expires_at
WHERE leader_leases.holder = excluded.holder OR leader_leases.expires_at <= ?3
RETURNING name, holder, epoch, acquired_at, expires_at
