-- A blob that starts a chain is its chain's id. ?1 blob id
UPDATE run_blobs SET chain = id WHERE id = ?1
