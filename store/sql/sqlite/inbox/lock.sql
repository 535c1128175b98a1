-- The run a message is sent to: its status and when its inbox closed (NULL: open). SQLite's
-- writer is one connection and every write transaction is BEGIN IMMEDIATE, so reading it in
-- the accepting transaction already keeps the run's closing out until the commit. ?1 run id
SELECT status, inbox_closed_at FROM runs WHERE id = ?1
