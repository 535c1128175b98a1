-- The forks of a run, oldest first: (id, fork_seq, status). ?1 run id
SELECT id, fork_seq, status FROM runs WHERE forked_from = ?1 ORDER BY created_at, id
