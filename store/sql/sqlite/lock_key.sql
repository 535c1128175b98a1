-- Serialises the writers of one key (SQLite's one writer already runs each write transaction
-- alone, so this only checks its argument). Enqueues skip it here (QueuePaths::LOCKS_KEYS).
-- ?1 key
SELECT ?1 IS NOT NULL
