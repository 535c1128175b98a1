-- Tasks, newest first, optionally of one status. ?1 status or NULL, ?2 limit
SELECT * FROM tasks WHERE (?1 IS NULL OR status = ?1) ORDER BY started_at DESC, id DESC LIMIT ?2
