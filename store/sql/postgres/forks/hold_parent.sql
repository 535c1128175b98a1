-- A fork's parent, held for the fork's transaction: found only while its history is kept,
-- and (on PostgreSQL) locked, so a purger running at the same time skips it rather than
-- purge the history the fork is about to share. $1 parent run id
UPDATE runs SET updated_at = updated_at WHERE id = $1 AND purged_at IS NULL
RETURNING id
