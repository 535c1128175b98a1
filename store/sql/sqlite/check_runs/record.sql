-- Records GitHub's id ?3 for run ?1's check run ?2.
UPDATE run_check_runs SET check_run_id = ?3 WHERE run_id = ?1 AND name = ?2
