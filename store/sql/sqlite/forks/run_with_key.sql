-- The run holding an idempotency key, if any (a bulk rerun's `rerun:<id>`). ?1 key
SELECT id FROM runs WHERE idempotency_key = ?1
