-- ?1 name, ?2 source
DELETE FROM schedules WHERE name = ?1 AND source = ?2 RETURNING id
