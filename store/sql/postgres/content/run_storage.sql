-- What one run's log, content and checkpoints take. $1 run id
SELECT
    (SELECT COUNT(*)::bigint FROM run_events WHERE run_id = $1) AS events,
    (SELECT COALESCE(SUM(octet_length(payload)), 0)::bigint FROM run_events
     WHERE run_id = $1) AS event_bytes,
    (SELECT COUNT(*)::bigint FROM run_blobs WHERE run_id = $1) AS blobs,
    (SELECT COALESCE(SUM(octet_length(body)), 0)::bigint FROM run_blobs WHERE run_id = $1) AS blob_bytes,
    (SELECT COALESCE(SUM(raw_size), 0)::bigint FROM run_blobs WHERE run_id = $1) AS blob_raw_bytes,
    (SELECT COUNT(*)::bigint FROM checkpoints WHERE run_id = $1) AS checkpoints,
    (SELECT COALESCE(SUM(octet_length(body)), 0)::bigint FROM checkpoints
     WHERE run_id = $1) AS checkpoint_bytes
