-- After a batch was marked: the runs of it a fork now holds (one made while the batch was being
-- chosen) are marked kept again, and returned. A statement of its own, so it sees forks
-- committed after the mark's snapshot (READ COMMITTED). $1 JSON array of run ids
UPDATE runs SET purged_at = NULL
WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb))
  AND EXISTS (SELECT 1 FROM runs f WHERE f.forked_from = runs.id AND f.purged_at IS NULL)
RETURNING id
