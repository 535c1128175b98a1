-- Takes a concurrency key for a claim without waiting (SQLite has one writer). ?1 key
SELECT ?1 IS NOT NULL
