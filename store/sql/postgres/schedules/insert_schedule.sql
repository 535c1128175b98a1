-- $1 id, $2 name, $3 source, $4 cron, $5 timezone, $6 agent, $7 prompt, $8 overlap, $9 missed,
-- $10 enabled, $11 next_fire_at, $12 now. No row when the name is taken.
INSERT INTO schedules (id, name, source, cron, timezone, agent, prompt, overlap, missed, enabled,
                       next_fire_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)
ON CONFLICT (name) DO NOTHING
RETURNING *
