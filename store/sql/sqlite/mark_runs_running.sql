-- ?1 now, ?2 JSON array of run ids
UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?1), updated_at = ?1
WHERE id IN (SELECT value FROM json_each(?2))
  AND status IN ('queued', 'waiting', 'awaiting_approval')
