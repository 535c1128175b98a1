-- Ended tasks not yet reported whose run sleeps: each of those runs is woken. $1 limit
SELECT t.run_id, t.id FROM tasks t JOIN runs r ON r.id = t.run_id
WHERE t.reported_at IS NULL AND t.status <> 'running' AND r.status = 'waiting'
ORDER BY t.ended_at, t.id
LIMIT $1
