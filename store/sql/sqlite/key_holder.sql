-- A running job other than ?2 holding concurrency key ?1.
SELECT id FROM jobs WHERE concurrency_key = ?1 AND status = 'running' AND id <> ?2 LIMIT 1
