-- Purge: removes the approvals rows of a batch of runs marked purged in this transaction.
-- ?1 JSON array of run ids
DELETE FROM approvals WHERE run_id IN (SELECT value FROM json_each(?1))
