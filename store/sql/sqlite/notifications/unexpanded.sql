-- Outbox rows not yet expanded into deliveries, oldest first, only of the agents in the JSON
-- array ?1 (a daemon decides only for agents it knows). ?2 limit
SELECT o.id, o.run_id, r.agent, o.status, o.created_at, o.expanded_at
FROM run_outbox o JOIN runs r ON r.id = o.run_id
WHERE o.expanded_at IS NULL AND r.agent IN (SELECT value FROM json_each(?1))
ORDER BY o.id
LIMIT ?2
