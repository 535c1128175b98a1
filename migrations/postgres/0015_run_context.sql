-- Nightshift schema v15 (PostgreSQL): what a run knows about what started it. Kept in
-- lockstep with migrations/sqlite/0015_run_context.sql.
--
-- A JSON object written at enqueue from trusted data, never from the model: for a GitHub
-- webhook, {"github": {"repo", "number", "head_sha", "installation_id"}} as the delivery
-- carried them. The GitHub tools read it (the review is pinned to the head SHA the run was
-- started for; the installation comes from the payload). NULL: nothing known.
ALTER TABLE runs ADD COLUMN context TEXT;
