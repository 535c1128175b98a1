-- The check runs run $1 opened (a JSON array, NULL when none or no such run).
SELECT check_runs FROM runs WHERE id = $1
