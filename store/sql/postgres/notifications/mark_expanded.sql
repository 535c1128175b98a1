-- Takes an outbox row for expansion; matches nothing when another daemon already expanded it.
-- $1 outbox id, $2 now
UPDATE run_outbox SET expanded_at = $2 WHERE id = $1 AND expanded_at IS NULL RETURNING id
