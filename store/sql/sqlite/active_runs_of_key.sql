-- The unfinished runs of concurrency key ?1 other than ?2, oldest first.
SELECT id, status, started_at FROM runs
WHERE concurrency_key = ?1 AND id <> ?2
  AND status IN ('queued', 'running', 'waiting', 'awaiting_approval')
ORDER BY created_at, id
