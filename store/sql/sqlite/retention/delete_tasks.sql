-- Purge: removes the background tasks of a batch of runs marked purged in this transaction
-- and returns their ids (whose log files go next). ?1 JSON array of run ids
DELETE FROM tasks WHERE run_id IN (SELECT value FROM json_each(?1))
RETURNING id
