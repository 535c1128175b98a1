-- Records what a claimed delivery enqueued. A row already done (a concurrent copy of the same
-- delivery finished first) is left as it is. ?1 hook, ?2 delivery_id, ?3 runs, ?4 now
UPDATE webhook_deliveries
SET status = 'done', runs = ?3, finished_at = ?4
WHERE hook = ?1 AND delivery_id = ?2 AND status = 'claimed'
