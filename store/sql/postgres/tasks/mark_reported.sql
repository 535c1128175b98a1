-- The run's log holds the task's ending. $1 id, $2 now
UPDATE tasks SET reported_at = $2 WHERE id = $1 AND reported_at IS NULL AND ended_at IS NOT NULL
