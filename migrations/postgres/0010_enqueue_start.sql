-- Nightshift schema v10 (PostgreSQL): kept in lockstep with
-- migrations/sqlite/0010_enqueue_start.sql, which gives SQLite a view whose INSTEAD OF trigger
-- enqueues a run and its start job in one statement. PostgreSQL already does that with a
-- writing CTE (store/sql/postgres/enqueue_plain.sql): nothing changes.
SELECT 1;
