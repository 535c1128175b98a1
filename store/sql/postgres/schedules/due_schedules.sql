-- Enabled schedules whose next fire is due at $1, earliest first, at most $2.
SELECT * FROM schedules
WHERE enabled AND next_fire_at IS NOT NULL AND next_fire_at <= $1
ORDER BY next_fire_at, name
LIMIT $2
