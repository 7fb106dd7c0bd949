-- The physical limit: a loop table shaped like loops_loop where it matters to a claim,
-- with 100,000 rows (psql -v rows=N overrides), all due. Deadlines are spread over the past
-- 1,000 hours and a claim moves one forward by an hour, so rows stay due for the whole run:
-- a timed pgbench run never runs dry, and ORDER BY next_at always has work at the head.
DROP TABLE IF EXISTS pgb_run;
DROP TABLE IF EXISTS pgb_loop;

CREATE TABLE pgb_loop (
    id integer PRIMARY KEY,
    state text NOT NULL,
    next_at timestamptz NOT NULL,
    prompt text NOT NULL
);
-- The same partial index as dshloop's loop_due_idx, for the same claim query.
CREATE INDEX pgb_loop_due_idx ON pgb_loop (next_at) WHERE state = 'scheduled';

-- One row per claimed occurrence, like loops_looprun. The (loop_id, scheduled_at) index costs
-- what dshloop's unique occurrence key costs, but is not unique: bench.run counts duplicates.
CREATE TABLE pgb_run (
    id bigserial PRIMARY KEY,
    loop_id integer NOT NULL,
    scheduled_at timestamptz NOT NULL,
    claimed_at timestamptz NOT NULL
);
CREATE INDEX pgb_run_occurrence_idx ON pgb_run (loop_id, scheduled_at);

INSERT INTO pgb_loop (id, state, next_at, prompt)
SELECT i, 'scheduled', now() - interval '1000 hours' + i * (3600000.0 / :rows) * interval '1 second', 'bench ' || i
FROM generate_series(1, :rows) AS i;
VACUUM ANALYZE pgb_loop;
