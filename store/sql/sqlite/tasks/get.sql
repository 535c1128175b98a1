-- One task. ?1 id
SELECT * FROM tasks WHERE id = ?1
