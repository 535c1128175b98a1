SELECT r.id AS run_id,
       (SELECT j.id FROM jobs j WHERE j.run_id = r.id AND j.kind = 'start'
        ORDER BY j.id LIMIT 1) AS job_id
FROM runs r
WHERE r.idempotency_key = $1
