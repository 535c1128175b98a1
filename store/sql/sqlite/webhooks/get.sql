-- ?1 hook, ?2 delivery_id
SELECT * FROM webhook_deliveries WHERE hook = ?1 AND delivery_id = ?2
