SELECT MAX(id) FROM jobs WHERE run_id = $1
