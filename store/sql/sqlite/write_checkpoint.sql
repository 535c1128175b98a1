-- Writes a checkpoint only while the writer's lease token is current. ?1 job id, ?2 token,
-- ?3 through_seq, ?4 format_version, ?5 body (the gzip of
-- a skeleton whose long strings are blobs: store/src/content/), ?6 size, ?7 now
INSERT INTO checkpoints (run_id, through_seq, format_version, body, size_bytes, job_id,
                         lease_token, created_at, encoding)
SELECT j.run_id, ?3, ?4, ?5, ?6, j.id, j.lease_token, ?7, 1
FROM jobs j
WHERE j.id = ?1 AND j.lease_token = ?2 AND j.status = 'running'
ON CONFLICT (run_id, through_seq) DO UPDATE SET
    format_version = excluded.format_version,
    body = excluded.body,
    size_bytes = excluded.size_bytes,
    job_id = excluded.job_id,
    lease_token = excluded.lease_token,
    created_at = excluded.created_at,
    encoding = excluded.encoding
RETURNING through_seq
