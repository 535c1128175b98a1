SELECT MIN(next_fire_at) FROM schedules WHERE enabled AND next_fire_at IS NOT NULL
