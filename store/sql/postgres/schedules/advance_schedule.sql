-- Moves a schedule past a fire, only if it is still armed for $2 (so two daemons cannot both
-- advance it) and, when $10 names a leader lease, only while ($11 holder, $12 epoch) holds it.
-- $1 id, $3 new next_fire_at, $4 fired at (or NULL), $5 run id (or NULL), $6 fired +,
-- $7 skipped +, $8 missed +, $9 now.
UPDATE schedules SET
    next_fire_at = $3,
    last_fire_at = COALESCE($4, last_fire_at),
    last_run_id = COALESCE($5, last_run_id),
    fired_count = fired_count + $6,
    skipped_count = skipped_count + $7,
    missed_count = missed_count + $8,
    updated_at = $9
WHERE id = $1 AND next_fire_at = $2
  AND ($10::text IS NULL OR EXISTS (
        SELECT 1 FROM leader_leases
        WHERE name = $10 AND holder = $11 AND epoch = $12::bigint AND expires_at > $9))
RETURNING id
