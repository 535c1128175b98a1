-- Running tasks whose owner stopped refreshing them end as lost. ?1 now, ?2 stale before
UPDATE tasks SET status = 'lost', ended_at = ?1,
    detail = 'the daemon running it (' || owner || ') stopped before the task ended'
WHERE status = 'running' AND heartbeat_at < ?2
RETURNING id
