-- Records how a running task ended; a task already ended (e.g. marked lost) is left alone.
-- $1 id, $2 status, $3 exit code, $4 detail, $5 output tail, $6 output bytes, $7 now
UPDATE tasks SET status = $2, exit_code = $3, detail = $4, output_tail = $5,
    output_bytes = $6, ended_at = $7
WHERE id = $1 AND status = 'running'
RETURNING run_id
