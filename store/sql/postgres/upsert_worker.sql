-- $1 id, $2 host, $3 pid, $4 now
INSERT INTO workers (id, host, pid, started_at, last_heartbeat_at) VALUES ($1, $2, $3, $4, $4)
ON CONFLICT (id) DO UPDATE SET last_heartbeat_at = excluded.last_heartbeat_at
