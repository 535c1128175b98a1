-- Operator actions, newest first: of one run when ?1 is not NULL, else all; ids below ?2;
-- at most ?3.
SELECT id, at, actor, action, run_id, target, detail FROM audit_log
WHERE (?1 IS NULL OR run_id = ?1) AND id < ?2
ORDER BY id DESC
LIMIT ?3
