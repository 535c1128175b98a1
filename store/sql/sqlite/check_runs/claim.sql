-- Claims the making of run ?1's check run ?2 at ?3: a row when the caller is to make it
-- (nobody had claimed it, or the claim is older than ?4 and no id was recorded); none when
-- it is made or another caller is making it.
INSERT INTO run_check_runs (run_id, name, claimed_at) VALUES (?1, ?2, ?3)
ON CONFLICT (run_id, name) DO UPDATE SET claimed_at = excluded.claimed_at
WHERE run_check_runs.check_run_id IS NULL AND run_check_runs.claimed_at < ?4
RETURNING claimed_at
