-- Claims several deliveries in one statement, each as claim.sql would: inserts it as
-- 'claimed', or (already there) counts the arrival. ?1 is a JSON array with one entry per
-- delivery, [hook, delivery_id, event, now], all different. Returns every row (received = 1:
-- this call inserted it), in no particular order.
INSERT INTO webhook_deliveries (hook, delivery_id, event, status, received, first_received_at,
                                last_received_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       'claimed', 1, json_extract(value, '$[3]'), json_extract(value, '$[3]')
FROM json_each(?1)
WHERE true
ON CONFLICT (hook, delivery_id) DO UPDATE
SET received = webhook_deliveries.received + 1, last_received_at = excluded.last_received_at
RETURNING *
