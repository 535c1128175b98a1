-- What one run's log, content and checkpoints take. ?1 run id
SELECT
    (SELECT COUNT(*) FROM run_events WHERE run_id = ?1) AS events,
    (SELECT COALESCE(SUM(LENGTH(CAST(payload AS BLOB))), 0) FROM run_events
     WHERE run_id = ?1) AS event_bytes,
    (SELECT COUNT(*) FROM run_blobs WHERE run_id = ?1) AS blobs,
    (SELECT COALESCE(SUM(LENGTH(body)), 0) FROM run_blobs WHERE run_id = ?1) AS blob_bytes,
    (SELECT COALESCE(SUM(raw_size), 0) FROM run_blobs WHERE run_id = ?1) AS blob_raw_bytes,
    (SELECT COUNT(*) FROM checkpoints WHERE run_id = ?1) AS checkpoints,
    (SELECT COALESCE(SUM(LENGTH(body)), 0) FROM checkpoints
     WHERE run_id = ?1) AS checkpoint_bytes
