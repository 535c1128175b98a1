-- Marks a batch of ended runs as purged and returns their ids: runs of status $2 (always an
-- end state) that ended before $3, hold history (not purged yet), have no job that is
-- queued or running and no background task still running and no fork that is kept. Rows another purger holds
-- are skipped, never waited for.
-- $1 now (purged_at), $2 status, $3 ended before (ms), $4 only this agent (NULL: any),
-- $5 JSON array of agents left out, $6 at most this many runs
UPDATE runs SET purged_at = $1
WHERE id IN (
    SELECT r.id FROM runs r
    WHERE r.status = $2
      AND r.status IN ({terminal_run_states})
      AND r.purged_at IS NULL
      AND r.finished_at < $3
      AND ($4::text IS NULL OR r.agent = $4::text)
      AND r.agent NOT IN (SELECT jsonb_array_elements_text($5::jsonb))
      AND NOT EXISTS (SELECT 1 FROM jobs j
                      WHERE j.run_id = r.id AND j.status IN ('queued', 'running'))
      AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = r.id AND t.status = 'running')
      AND NOT EXISTS (SELECT 1 FROM runs f
                      WHERE f.forked_from = r.id AND f.purged_at IS NULL)
    ORDER BY r.finished_at
    LIMIT $6
    FOR UPDATE SKIP LOCKED
)
RETURNING id
