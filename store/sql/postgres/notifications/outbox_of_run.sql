-- A run's outbox rows (at most one: a terminal run never changes status again). $1 run id
SELECT o.id, o.run_id, r.agent, o.status, o.created_at, o.expanded_at
FROM run_outbox o JOIN runs r ON r.id = o.run_id
WHERE o.run_id = $1
ORDER BY o.id
