-- Purge without summaries: removes the rows of a batch of runs marked purged in this
-- transaction, once their history is gone. $1 JSON array of run ids
DELETE FROM runs WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb))
  AND purged_at IS NOT NULL
