-- A run's log after $2, in order. A fork's log is its parent's up to its fork_seq, then its
-- own (store/src/content/, docs/concepts/storage.md): `lineage` walks up the forks, each
-- ancestor read only up to the lowest fork point below it. $1 run id, $2 after seq
WITH RECURSIVE lineage (run_id, upto, parent, fork_seq) AS (
    SELECT r.id, 9223372036854775807, r.forked_from, r.fork_seq FROM runs r WHERE r.id = $1
    UNION ALL
    SELECT p.id,
           CASE WHEN l.fork_seq < l.upto THEN l.fork_seq ELSE l.upto END,
           p.forked_from, p.fork_seq
    FROM runs p JOIN lineage l ON p.id = l.parent
)
SELECT e.* FROM lineage l
JOIN run_events e ON e.run_id = l.run_id AND e.seq > $2 AND e.seq <= l.upto
ORDER BY e.seq
