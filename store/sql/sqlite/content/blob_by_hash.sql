-- ?1 run id, ?2 hash
SELECT id FROM run_blobs WHERE run_id = ?1 AND hash = ?2
