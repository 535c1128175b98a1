-- Ended tasks not yet reported whose run sleeps and was not woken for them yet: each of
-- those runs is woken. ?1 limit
SELECT t.run_id, t.id FROM tasks t JOIN runs r ON r.id = t.run_id
WHERE t.reported_at IS NULL AND t.status <> 'running' AND r.status = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.dedupe_key = 'task:' || t.id)
ORDER BY t.ended_at, t.id
LIMIT ?1
