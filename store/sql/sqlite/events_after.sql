SELECT * FROM run_events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq
