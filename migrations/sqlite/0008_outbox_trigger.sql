-- Nightshift schema v8 (SQLite): kept in lockstep with
-- migrations/postgres/0008_outbox_trigger.sql, which makes the PostgreSQL run_outbox trigger
-- function plan its INSERT once per connection instead of on every call. SQLite's trigger
-- (version 5) is a plain INSERT compiled with the statement that fires it: nothing changes.
SELECT 1;
