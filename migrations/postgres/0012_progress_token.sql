-- Nightshift schema v12 (PostgreSQL): which attempt of a job made progress. Kept in lockstep with
-- migrations/sqlite/0012_progress_token.sql.
--
-- LeasedJob::record_progress sets progress_token to the job's lease_token (under that lease),
-- so progress_token = lease_token says "the current attempt made progress". When such a lease
-- expires (its worker died), the rescue gives the attempt back instead of counting it towards
-- max_attempts: crashes that made progress never dead-letter a job; a job that crashes
-- without progress attempt after attempt still does. NULL: no attempt recorded progress yet.
-- Unindexed, and no statement of the claim or settle path reads it.
ALTER TABLE jobs ADD COLUMN progress_token BIGINT;
