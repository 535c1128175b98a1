-- The chain of each blob asked for. ?1 blob ids (a JSON array)
SELECT id, COALESCE(chain, id) AS chain FROM run_blobs WHERE id IN (SELECT value FROM json_each(?1))
