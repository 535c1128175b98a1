-- Gives up run ?1's claim on check run ?2 (GitHub refused: nothing was made), unless an id
-- was recorded.
DELETE FROM run_check_runs WHERE run_id = ?1 AND name = ?2 AND check_run_id IS NULL
