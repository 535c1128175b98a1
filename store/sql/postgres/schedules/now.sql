-- The database's clock in milliseconds since the epoch: the one clock of the schedule timer,
-- whatever the clocks of the daemons sharing this database say.
SELECT (extract(epoch FROM now()) * 1000)::bigint
