-- The newest unfinished run holding a concurrency key (a webhook `resume` route's target).
SELECT * FROM runs
WHERE concurrency_key = ?1
  AND status IN ({live_run_states})
ORDER BY created_at DESC, id DESC
LIMIT 1
