-- Forgets a claimed delivery that enqueued nothing (refused after the claim), so that a later
-- redelivery is processed afresh. $1 hook, $2 delivery_id
DELETE FROM webhook_deliveries WHERE hook = $1 AND delivery_id = $2 AND status = 'claimed'
