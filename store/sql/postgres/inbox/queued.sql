-- The messages accepted for run $1 and not yet taken: its queued resume jobs that carry a
-- message, oldest first. A resume job's payload is Nightshift's own JSON, tag first
-- ({"type":"message","text":…}; ResumeReason::to_payload), so a prefix match finds them
-- without parsing payloads of other kinds.
SELECT id, payload FROM jobs
WHERE run_id = $1 AND kind = 'resume' AND status = 'queued'
  AND payload LIKE '{"type":"message"%'
ORDER BY id
