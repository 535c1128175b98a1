SELECT name, holder, epoch, acquired_at, expires_at FROM leader_leases WHERE name = $1
