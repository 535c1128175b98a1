SELECT * FROM approvals WHERE run_id = $1 AND call_id = $2
