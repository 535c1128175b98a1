-- The unfinished runs of concurrency key $1 other than $2, oldest first.
SELECT id, status, started_at FROM runs
WHERE concurrency_key = $1 AND id <> $2
  AND status IN ({live_run_states})
ORDER BY created_at, id
