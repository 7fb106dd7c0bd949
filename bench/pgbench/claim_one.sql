-- One claim per transaction, as a clock that claims one occurrence at a time would do it:
-- lock the earliest due loop (skipping rows another client holds), move its deadline, record a run.
BEGIN;
SELECT id, extract(epoch FROM next_at) AS due FROM pgb_loop
 WHERE state = 'scheduled' AND next_at <= now()
 ORDER BY next_at LIMIT 1 FOR UPDATE SKIP LOCKED \gset
UPDATE pgb_loop SET next_at = next_at + interval '1 hour' WHERE id = :id;
INSERT INTO pgb_run (loop_id, scheduled_at, claimed_at) VALUES (:id, to_timestamp(:due), now());
END;
