-- Nightshift schema v17 (PostgreSQL): kept in lockstep with
-- migrations/sqlite/0017_enqueue_keyed.sql, which gives SQLite's enqueue view a concurrency
-- key. PostgreSQL's one-statement enqueues (store/sql/postgres/enqueue_plain.sql,
-- enqueue_plain_many.sql) take the key as a parameter: nothing changes.
SELECT 1;
