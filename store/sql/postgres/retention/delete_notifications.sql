-- Purge: removes the notifications rows of a batch of runs marked purged in this transaction.
-- $1 JSON array of run ids
DELETE FROM notifications WHERE run_id IN (SELECT jsonb_array_elements_text($1::jsonb))
