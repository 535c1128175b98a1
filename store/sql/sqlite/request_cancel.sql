-- ?1 run id, ?2 now
UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, ?2), updated_at = ?2
WHERE id = ?1
