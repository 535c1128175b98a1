-- One delivery by its delivery id. $1 delivery id
SELECT * FROM notifications WHERE delivery_id = $1
