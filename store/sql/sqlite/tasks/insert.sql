-- Records a task that just started. ?1 id, ?2 run id, ?3 call id, ?4 command, ?5 owner,
-- ?6 now, ?7 deadline
INSERT INTO tasks (id, run_id, call_id, command, owner, status, started_at, deadline_at, heartbeat_at)
VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?6)
