-- One operator action. $1 at, $2 actor, $3 action, $4 run id, $5 target, $6 detail
INSERT INTO audit_log (at, actor, action, run_id, target, detail)
VALUES ($1, $2, $3, $4, $5, $6)
