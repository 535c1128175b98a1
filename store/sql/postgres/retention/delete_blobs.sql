-- Purge: removes the stored content (run_blobs) of a batch of runs marked purged in this
-- transaction, after their events and checkpoints. $1 JSON array of run ids
DELETE FROM run_blobs WHERE run_id IN (SELECT jsonb_array_elements_text($1::jsonb))
