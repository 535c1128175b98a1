-- Copies a run's usage totals (projected from its events) onto the run row, only while the
-- writer's lease is current (FOR SHARE: see append_event.sql). $1 job id, $2 token,
-- $3 turns, $4 input, $5 output, $6 cache_read, $7 cache_write, $8 cost_usd, $9 agent_hash,
-- $10 now
UPDATE runs SET
    turns = $3,
    input_tokens = $4,
    output_tokens = $5,
    cache_read_tokens = $6,
    cache_write_tokens = $7,
    cost_usd = $8,
    agent_hash = COALESCE(agent_hash, $9),
    updated_at = $10
WHERE id = (SELECT j.run_id FROM jobs j
            WHERE j.id = $1 AND j.lease_token = $2 AND j.status = 'running'
            FOR SHARE)
RETURNING id
