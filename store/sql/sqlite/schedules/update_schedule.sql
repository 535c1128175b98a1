-- Changes a schedule made through the API. ?1 name, ?2 cron, ?3 timezone, ?4 agent, ?5 prompt,
-- ?6 overlap, ?7 missed, ?8 enabled, ?9 re-arm?, ?10 next_fire_at (when re-arming), ?11 now.
UPDATE schedules SET
    cron = ?2, timezone = ?3, agent = ?4, prompt = ?5, overlap = ?6, missed = ?7, enabled = ?8,
    next_fire_at = CASE WHEN ?9 THEN ?10 ELSE next_fire_at END,
    updated_at = ?11
WHERE name = ?1 AND source = 'api'
RETURNING *
