-- A fire outside the timer (the API's trigger). ?1 id, ?2 fired at, ?3 run id, ?4 now.
UPDATE schedules SET
    last_fire_at = ?2, last_run_id = ?3, fired_count = fired_count + 1, updated_at = ?4
WHERE id = ?1
