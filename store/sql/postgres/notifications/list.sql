-- Deliveries, newest first. $1 run id (NULL for all), $2 status (NULL for all), $3 limit
SELECT * FROM notifications
WHERE ($1::text IS NULL OR run_id = $1) AND ($2::text IS NULL OR status = $2)
ORDER BY id DESC
LIMIT $3
