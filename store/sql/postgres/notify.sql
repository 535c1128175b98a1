-- Wakes idle workers of every daemon on this database when the transaction commits.
-- $1 channel, $2 lane
SELECT pg_notify($1, $2)
