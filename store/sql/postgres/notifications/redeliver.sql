-- Gives a dead delivery a fresh set of attempts, due now; the same delivery id, so receivers
-- still dedupe. $1 delivery id, $2 now
UPDATE notifications SET status = 'pending', attempts = 0, next_attempt_at = $2, updated_at = $2
WHERE delivery_id = $1 AND status = 'dead'
RETURNING id
