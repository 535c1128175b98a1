-- The run a message is sent to: its status and when its inbox closed (NULL: open), with the
-- run row locked until the accepting transaction commits, so the run's closing
-- (inbox/close.sql, which locks the same row first) comes wholly before or wholly after it.
-- NO KEY UPDATE leaves the foreign keys of jobs inserted meanwhile unblocked. $1 run id
SELECT status, inbox_closed_at FROM runs WHERE id = $1 FOR NO KEY UPDATE
