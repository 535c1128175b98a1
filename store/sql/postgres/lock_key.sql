-- Serialises the enqueues of one concurrency key until the transaction ends. $1 key
SELECT pg_advisory_xact_lock(hashtextextended($1, 0))
