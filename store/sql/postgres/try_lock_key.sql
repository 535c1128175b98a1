-- Takes a concurrency key for a claim without waiting: a claim never waits on a key (an
-- enqueue holding it may be waiting for a row the claim has locked), it leaves the job queued.
-- $1 key
SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))
