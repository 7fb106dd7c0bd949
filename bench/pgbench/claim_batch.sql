-- 100 claims per transaction in one statement: lock the 100 earliest due loops, move their
-- deadlines and record their runs. The most occurrences/s this database can claim.
WITH due AS (
    SELECT id, next_at FROM pgb_loop
     WHERE state = 'scheduled' AND next_at <= now()
     ORDER BY next_at LIMIT 100 FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE pgb_loop AS loop SET next_at = loop.next_at + interval '1 hour'
      FROM due WHERE loop.id = due.id
    RETURNING due.id, due.next_at
)
INSERT INTO pgb_run (loop_id, scheduled_at, claimed_at) SELECT id, next_at, now() FROM moved;
