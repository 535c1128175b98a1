-- Serialises the enqueues of one concurrency key (SQLite has one writer already). ?1 key
SELECT ?1 IS NOT NULL
