-- Removes a run inserted moments ago in this transaction that the skip policy dropped (it has
-- no job yet). ?1 run id
DELETE FROM runs WHERE id = ?1
