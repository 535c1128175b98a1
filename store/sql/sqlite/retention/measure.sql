-- The history of a batch of runs about to be purged: (events, event bytes — payloads kept in
-- their rows and the run's stored content, `run_blobs` — checkpoints, checkpoint bytes).
-- ?1 JSON array of run ids
SELECT
    (SELECT count(*) FROM run_events WHERE run_id IN (SELECT value FROM json_each(?1))),
    (SELECT COALESCE(sum(length(CAST(payload AS BLOB))), 0) FROM run_events
     WHERE run_id IN (SELECT value FROM json_each(?1)))
    + (SELECT COALESCE(sum(length(body)), 0) FROM run_blobs
       WHERE run_id IN (SELECT value FROM json_each(?1))),
    (SELECT count(*) FROM checkpoints WHERE run_id IN (SELECT value FROM json_each(?1))),
    (SELECT COALESCE(sum(size_bytes), 0) FROM checkpoints
     WHERE run_id IN (SELECT value FROM json_each(?1)))
