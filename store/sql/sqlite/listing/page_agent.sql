-- A page of runs newest first, read along runs_agent_created in keyset order: the rows before
-- the cursor ?8/?9 (created_at, id), created in [?5, ?6), of at most ?10 rows.
-- ?1 status, ?2 agent, ?3 trigger, ?4 concurrency key, ?7 prompt text (NULL: any).
SELECT id, agent, status, trigger_kind, concurrency_key, idempotency_key,
       substr(input, 1, 400) AS prompt_head, turns, input_tokens, output_tokens,
       cache_read_tokens, cache_write_tokens, cost_usd, substr(error, 1, 1000) AS error_head,
       created_at, started_at, finished_at, updated_at
FROM runs
WHERE agent = ?2
  AND (created_at, id) < (?8, ?9)
  AND created_at >= ?5 AND created_at < ?6
  AND (?1 IS NULL OR status = ?1)
  AND (?3 IS NULL OR trigger_kind = ?3)
  AND (?4 IS NULL OR concurrency_key = ?4)
  AND (?7 IS NULL OR instr(lower(input), lower(?7)) > 0)
ORDER BY agent DESC, created_at DESC, id DESC
LIMIT ?10
