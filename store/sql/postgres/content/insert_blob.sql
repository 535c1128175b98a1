-- Stores one blob of a run's content, unless the run holds one of the same hash: then no row
-- comes back. $1 run id, $2 chain (NULL: starts one), $3 hash, $4 raw size, $5 body, $6 now
INSERT INTO run_blobs (run_id, chain, hash, raw_size, body, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (run_id, hash) DO NOTHING
RETURNING id
