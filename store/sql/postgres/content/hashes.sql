-- Every blob of a run by hash, for a writer that dedupes a whole document. $1 run id
SELECT hash, id FROM run_blobs WHERE run_id = $1
