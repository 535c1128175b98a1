-- Purge: removes the run_outbox rows of a batch of runs marked purged in this transaction.
-- ?1 JSON array of run ids
DELETE FROM run_outbox WHERE run_id IN (SELECT value FROM json_each(?1))
