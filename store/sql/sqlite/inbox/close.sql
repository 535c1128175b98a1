-- Closes the inbox of the leased job's run: from now on a message for it is refused. Fenced
-- by the lease; a run closed before keeps its time. ?1 job id, ?2 token, ?3 now
UPDATE runs SET inbox_closed_at = COALESCE(inbox_closed_at, ?3), updated_at = ?3
WHERE id = (SELECT run_id FROM jobs WHERE id = ?1 AND lease_token = ?2 AND status = 'running')
RETURNING id
