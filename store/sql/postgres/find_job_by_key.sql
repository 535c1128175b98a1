SELECT run_id, id AS job_id FROM jobs WHERE dedupe_key = $1
