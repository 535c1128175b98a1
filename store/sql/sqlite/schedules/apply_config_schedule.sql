-- Creates or re-applies a schedule from the config file (parameters as insert_schedule). The
-- armed next fire is kept while the timing is unchanged (so downtime is still detected) and
-- replaced when the expression, the zone or the enabled flag changed. No row when the name
-- belongs to a schedule made through the API.
INSERT INTO schedules (id, name, source, cron, timezone, agent, prompt, overlap, missed, enabled,
                       next_fire_at, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)
ON CONFLICT (name) DO UPDATE SET
    next_fire_at = CASE
        WHEN schedules.cron = excluded.cron AND schedules.timezone = excluded.timezone
             AND schedules.enabled AND excluded.enabled AND schedules.next_fire_at IS NOT NULL
        THEN schedules.next_fire_at
        ELSE excluded.next_fire_at END,
    cron = excluded.cron,
    timezone = excluded.timezone,
    agent = excluded.agent,
    prompt = excluded.prompt,
    overlap = excluded.overlap,
    missed = excluded.missed,
    enabled = excluded.enabled,
    updated_at = excluded.updated_at
WHERE schedules.source = 'config'
RETURNING *
