-- Adds check run name ?2 to run ?1's check_runs; a row when it was added (none when the
-- name was there already, or there is no such run).
UPDATE runs SET check_runs = json_insert(COALESCE(check_runs, '[]'), '$[#]', ?2)
WHERE id = ?1
  AND NOT EXISTS (SELECT 1 FROM json_each(COALESCE(runs.check_runs, '[]')) WHERE value = ?2)
RETURNING id
