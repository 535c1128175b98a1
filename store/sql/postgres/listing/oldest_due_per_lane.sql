-- Per lane, the earliest due time among queued jobs due by $1 (now): how long the lane's
-- longest-waiting due job has waited. Lanes with no due job are left out.
SELECT lane, MIN(run_at) AS run_at
FROM jobs
WHERE status = 'queued' AND lease_owner IS NULL AND run_at <= $1
GROUP BY lane
ORDER BY lane
