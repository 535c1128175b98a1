-- The chain of each blob asked for. $1 blob ids (a JSON array)
SELECT id, COALESCE(chain, id) AS chain FROM run_blobs WHERE id IN (SELECT (jsonb_array_elements_text($1::jsonb))::bigint)
