-- Adds check run name $2 to run $1's check_runs; a row when it was added (none when the
-- name was there already, or there is no such run).
UPDATE runs SET check_runs = (COALESCE(check_runs::jsonb, '[]'::jsonb) || to_jsonb($2::text))::text
WHERE id = $1
  AND NOT (COALESCE(check_runs::jsonb, '[]'::jsonb) ? $2)
RETURNING id
