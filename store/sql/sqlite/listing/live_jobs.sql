-- Live jobs (queued, running, parked) per state and lane, counted from jobs_live_state_lane
-- alone: finished jobs are not in it, so the cost follows the live jobs, not the history.
SELECT status, lane, COUNT(*) AS count
FROM jobs
WHERE status IN ('queued', 'running', 'parked')
GROUP BY status, lane
ORDER BY status, lane
