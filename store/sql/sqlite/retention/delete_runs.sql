-- Purge without summaries: removes the rows of a batch of runs marked purged in this
-- transaction, once their history is gone. ?1 JSON array of run ids
DELETE FROM runs WHERE id IN (SELECT value FROM json_each(?1)) AND purged_at IS NOT NULL
