-- Records what several claimed deliveries enqueued, each as finish.sql would (a row already
-- done is left as it is). ?1 is a JSON array with one entry per delivery,
-- [hook, delivery_id, runs, now]. Returns the deliveries that became done.
UPDATE webhook_deliveries SET
    status = 'done',
    runs = f.runs,
    finished_at = f.now
FROM (
    SELECT json_extract(value, '$[0]') AS hook,
           json_extract(value, '$[1]') AS delivery_id,
           json_extract(value, '$[2]') AS runs,
           json_extract(value, '$[3]') AS now
    FROM json_each(?1)
) AS f
WHERE webhook_deliveries.hook = f.hook AND webhook_deliveries.delivery_id = f.delivery_id
  AND webhook_deliveries.status = 'claimed'
RETURNING webhook_deliveries.hook, webhook_deliveries.delivery_id
