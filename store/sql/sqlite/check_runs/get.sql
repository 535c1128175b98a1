-- Run ?1's claim on check run ?2: GitHub's id once recorded, and when it was claimed.
SELECT check_run_id, claimed_at FROM run_check_runs WHERE run_id = ?1 AND name = ?2
