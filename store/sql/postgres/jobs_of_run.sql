SELECT * FROM jobs WHERE run_id = $1 ORDER BY id
