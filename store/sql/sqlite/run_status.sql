SELECT status FROM runs WHERE id = ?1
