-- The runs whose id or idempotency key is $1 (at most two: by the primary key and the unique
-- key), newest first, with the same filters as page.sql: $2 status, $3 agent, $4 trigger,
-- $5 concurrency key (NULL: any), created in [$6, $7), before the cursor $8/$9.
SELECT id, agent, status, trigger_kind, concurrency_key, idempotency_key,
       substr(input, 1, 400) AS prompt_head, turns, input_tokens, output_tokens,
       cache_read_tokens, cache_write_tokens, cost_usd, substr(error, 1, 1000) AS error_head,
       created_at, started_at, finished_at, updated_at
FROM runs
WHERE (id = $1 OR idempotency_key = $1)
  AND (created_at, id) < ($8, $9)
  AND created_at >= $6 AND created_at < $7
  AND ($2::text IS NULL OR status = $2)
  AND ($3::text IS NULL OR agent = $3)
  AND ($4::text IS NULL OR trigger_kind = $4)
  AND ($5::text IS NULL OR concurrency_key = $5)
ORDER BY created_at DESC, id DESC
