-- Every blob of the chains asked for, in the order a reader decodes them. $1 chain ids (a
-- JSON array)
SELECT id, chain, raw_size, body FROM run_blobs
WHERE chain IN (SELECT (jsonb_array_elements_text($1::jsonb))::bigint)
ORDER BY chain, id
