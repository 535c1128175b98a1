-- Every blob a run's checkpoint may refer to, by hash, for a writer that dedupes a whole
-- document: the run's own and, for a fork, its ancestors' (whose history it shares; retention
-- keeps a parent while a fork of it is kept). $1 run id
WITH RECURSIVE lineage (run_id, parent) AS (
    SELECT r.id, r.forked_from FROM runs r WHERE r.id = $1
    UNION ALL
    SELECT p.id, p.forked_from FROM runs p JOIN lineage l ON p.id = l.parent
)
SELECT b.hash, b.id FROM lineage l JOIN run_blobs b ON b.run_id = l.run_id
