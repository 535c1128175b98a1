-- Nightshift schema v16 (PostgreSQL): the check runs a run opened. Kept in lockstep with
-- migrations/sqlite/0016_run_check_runs.sql.
--
-- A JSON array of names (["Nightshift review"]), each written before the run's job asks
-- GitHub to create that check run `in_progress`. When the run ends, its outbox row is
-- completed for every name here as well as for the one its agent's config names then, so a
-- check run renamed or removed from the config while a run had it open is still completed.
-- NULL: the run opened none.
ALTER TABLE runs ADD COLUMN check_runs TEXT;
