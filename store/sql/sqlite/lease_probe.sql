-- Why a lease-guarded write matched no row: the job's state, lease token and cancel request,
-- and its run's status (a stop requested by a supersession rather than a cancel). ?1 job id
SELECT j.status, j.lease_token, j.cancel_requested_at, r.status
FROM jobs j JOIN runs r ON r.id = j.run_id
WHERE j.id = ?1
