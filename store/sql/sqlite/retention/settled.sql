-- For the sweep of a daemon's run directories: of the runs named, those that still exist,
-- as (id, agent, settled, purged) with flags 0 or 1. Settled: ended, with no job queued
-- or running and no background task running, so nothing works in its workspace any
-- more. A run named but not returned no longer exists. ?1 JSON array of run ids
SELECT r.id, r.agent,
    CASE WHEN (r.status IN ({terminal_run_states})
     AND NOT EXISTS (SELECT 1 FROM jobs j
                     WHERE j.run_id = r.id AND j.status IN ('queued', 'running'))
     AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = r.id AND t.status = 'running'))
        THEN 1 ELSE 0 END AS settled,
    CASE WHEN r.purged_at IS NULL THEN 0 ELSE 1 END AS purged
FROM runs r
WHERE r.id IN (SELECT value FROM json_each(?1))
