-- After a checkpoint is written: the run's older ones go (the newest refers to the run's
-- blobs, which stay). ?1 the writer's job id, ?2 the new checkpoint's through_seq
DELETE FROM checkpoints
WHERE run_id = (SELECT run_id FROM jobs WHERE id = ?1) AND through_seq < ?2
