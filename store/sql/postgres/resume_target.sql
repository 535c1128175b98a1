-- What a resume needs to know of its run (its status was read before): its concurrency
-- key, and how many of its jobs are queued or running besides job $2. $1 run id,
-- $2 the new job's id
SELECT r.concurrency_key,
       (SELECT COUNT(*) FROM jobs j
        WHERE j.run_id = r.id AND j.id <> $2 AND j.status IN ('queued', 'running')) AS busy
FROM runs r WHERE r.id = $1
