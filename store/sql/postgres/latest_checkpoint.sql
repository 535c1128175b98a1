SELECT * FROM checkpoints WHERE run_id = $1 ORDER BY through_seq DESC LIMIT 1
