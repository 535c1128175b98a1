SELECT * FROM workers ORDER BY started_at, id
