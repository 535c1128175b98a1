-- The live leases (running jobs, from jobs_lease_expiry), soonest expiry first, with their
-- run's agent and the holder's last worker heartbeat (NULL when the worker is not registered).
SELECT j.id AS job_id, j.run_id, r.agent, j.lane, j.lease_owner AS owner, j.lease_token,
       j.attempts, j.max_attempts, j.lease_expires_at, j.updated_at,
       w.last_heartbeat_at AS worker_heartbeat_at
FROM jobs j
JOIN runs r ON r.id = j.run_id
LEFT JOIN workers w ON w.id = j.lease_owner
WHERE j.status = 'running'
ORDER BY j.lease_expires_at, j.id
