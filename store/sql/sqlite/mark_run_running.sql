-- By primary key, one run per claimed job. ?1 now, ?2 run id
UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?1), updated_at = ?1
WHERE id = ?2 AND status IN ('queued', 'waiting', 'awaiting_approval')
