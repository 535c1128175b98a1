SELECT * FROM schedules ORDER BY name
