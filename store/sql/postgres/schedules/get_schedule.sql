SELECT * FROM schedules WHERE name = $1
