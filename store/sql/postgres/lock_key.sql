-- Serialises the enqueues of one concurrency key whose policy decides from its other runs (all
-- but `queue`, which takes no lock) until the transaction ends. $1 key
SELECT pg_advisory_xact_lock(hashtextextended($1, 0))
