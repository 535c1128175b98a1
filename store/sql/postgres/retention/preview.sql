-- What a purge by one rule would remove, changing nothing: (runs, events, event bytes (in the
-- event rows and the runs' stored content, `run_blobs`),
-- checkpoints, checkpoint bytes) of the runs `retention/mark.sql` would mark with no limit.
-- $1 status, $2 ended before (ms), $3 only this agent (NULL: any), $4 JSON array of agents
-- left out
WITH due AS (
    SELECT r.id FROM runs r
    WHERE r.status = $1
      AND r.status IN ({terminal_run_states})
      AND r.purged_at IS NULL
      AND r.finished_at < $2
      AND ($3::text IS NULL OR r.agent = $3::text)
      AND r.agent NOT IN (SELECT jsonb_array_elements_text($4::jsonb))
      AND NOT EXISTS (SELECT 1 FROM jobs j
                      WHERE j.run_id = r.id AND j.status IN ('queued', 'running'))
      AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = r.id AND t.status = 'running')
      AND NOT EXISTS (SELECT 1 FROM runs f
                      WHERE f.forked_from = r.id AND f.purged_at IS NULL)
)
SELECT
    (SELECT count(*) FROM due)::BIGINT,
    (SELECT count(*) FROM run_events e WHERE e.run_id IN (SELECT id FROM due))::BIGINT,
    ((SELECT COALESCE(sum(octet_length(e.payload)), 0) FROM run_events e
      WHERE e.run_id IN (SELECT id FROM due))
     + (SELECT COALESCE(sum(octet_length(b.body)), 0) FROM run_blobs b
        WHERE b.run_id IN (SELECT id FROM due)))::BIGINT,
    (SELECT count(*) FROM checkpoints c WHERE c.run_id IN (SELECT id FROM due))::BIGINT,
    (SELECT COALESCE(sum(c.size_bytes), 0) FROM checkpoints c
     WHERE c.run_id IN (SELECT id FROM due))::BIGINT
