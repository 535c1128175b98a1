-- Claims a delivery: inserts it as 'claimed', or (when it is already there, claimed or done)
-- counts the arrival. Either way returns the row; received = 1 means this call inserted it.
-- ?1 hook, ?2 delivery_id, ?3 event, ?4 now
INSERT INTO webhook_deliveries (hook, delivery_id, event, status, received, first_received_at,
                                last_received_at)
VALUES (?1, ?2, ?3, 'claimed', 1, ?4, ?4)
ON CONFLICT (hook, delivery_id) DO UPDATE
SET received = webhook_deliveries.received + 1, last_received_at = excluded.last_received_at
RETURNING *
