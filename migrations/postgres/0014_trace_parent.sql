-- Nightshift schema v14 (PostgreSQL): the W3C traceparent a run was started with. Kept in
-- lockstep with migrations/sqlite/0014_trace_parent.sql.
--
-- A webhook delivery or API request that carries `traceparent` starts a run that continues
-- the sender's trace: every job of the run, on any daemon, parents its span under the run
-- span of that trace (nightshift_telemetry::traces::RunTrace). NULL: the run's trace is its
-- own (its id is the run's id). Only a valid, normalised header is stored. Adding a nullable
-- column without a default rewrites nothing.
ALTER TABLE runs ADD COLUMN trace_parent TEXT;
