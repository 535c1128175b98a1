-- Newest first. $1 status filter (NULL for all), $2 limit
SELECT * FROM runs WHERE ($1::text IS NULL OR status = $1) ORDER BY created_at DESC, id DESC LIMIT $2
