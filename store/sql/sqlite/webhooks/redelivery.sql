-- A delivery that was already done arrives again: count it and return the row.
-- ?1 hook, ?2 delivery_id, ?3 now
UPDATE webhook_deliveries
SET received = received + 1, last_received_at = ?3
WHERE hook = ?1 AND delivery_id = ?2 AND status = 'done'
RETURNING *
