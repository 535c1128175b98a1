SELECT * FROM runs WHERE id = ?1
