-- Newest first. ?1 hook, ?2 limit
SELECT * FROM webhook_deliveries WHERE hook = ?1
ORDER BY first_received_at DESC, delivery_id DESC LIMIT ?2
