-- Nightshift schema v19 (PostgreSQL): a run's inbox closes before it ends. Kept in lockstep
-- with migrations/sqlite/0019_run_inbox.sql.
--
-- A message for a run (a resume job carrying {"type": "message"}) is accepted only while this
-- is NULL. The job that ends the run sets it first, in a transaction that also checks that no
-- accepted message is still queued; accepting a message locks the run row and reads it. So a
-- message is either taken by the run before it ends or refused when it is sent, never
-- accepted and then dropped. NULL for a run that never ended through its own job.
ALTER TABLE runs ADD COLUMN inbox_closed_at BIGINT;
