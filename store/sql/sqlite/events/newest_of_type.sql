-- A run's newest events of one type below a seq, newest first: the primary key (run_id, seq)
-- walked backwards from ?3 until ?4 rows of type ?2 are found.
-- ?1 run id, ?2 type, ?3 below this seq, ?4 limit
SELECT * FROM run_events
WHERE run_id = ?1 AND type = ?2 AND seq < ?3
ORDER BY seq DESC
LIMIT ?4
