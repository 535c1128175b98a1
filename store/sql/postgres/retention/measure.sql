-- The history of a batch of runs about to be purged: (events, event bytes, checkpoints,
-- checkpoint bytes). $1 JSON array of run ids
SELECT
    (SELECT count(*) FROM run_events
     WHERE run_id IN (SELECT jsonb_array_elements_text($1::jsonb)))::BIGINT,
    (SELECT COALESCE(sum(octet_length(payload)), 0) FROM run_events
     WHERE run_id IN (SELECT jsonb_array_elements_text($1::jsonb)))::BIGINT,
    (SELECT count(*) FROM checkpoints
     WHERE run_id IN (SELECT jsonb_array_elements_text($1::jsonb)))::BIGINT,
    (SELECT COALESCE(sum(size_bytes), 0) FROM checkpoints
     WHERE run_id IN (SELECT jsonb_array_elements_text($1::jsonb)))::BIGINT
