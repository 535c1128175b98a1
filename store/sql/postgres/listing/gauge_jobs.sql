-- The jobs the metrics gauges show, per state and lane, as of $1 (now): `queued` only when
-- due, `delayed` when queued for later, `running`, and `parked` only for runs that have not
-- ended (a parked job of an ended run is not waiting for anything).
SELECT CASE WHEN j.status = 'queued' AND j.run_at > $1 THEN 'delayed' ELSE j.status END AS state,
       j.lane, COUNT(*) AS count
FROM jobs j
WHERE j.status IN ('queued', 'running')
   OR (j.status = 'parked'
       AND EXISTS (SELECT 1 FROM runs r WHERE r.id = j.run_id
                   AND r.status IN ({live_run_states})))
GROUP BY 1, 2
ORDER BY 1, 2
