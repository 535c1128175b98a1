-- Links a new run to the run it was forked from. $1 the fork's id, $2 parent's id, $3 the
-- last of the parent's events the fork shares
UPDATE runs SET forked_from = $2, fork_seq = $3 WHERE id = $1
