"""When a loop runs: the pure schedule maths, with no Django and no database.

The schedule kinds and their occurrences (`schedules`), their text forms (`schedule_text`), the
shortest gap of a schedule (`schedule_gaps`, over a zone's UTC-offset changes read by
`zone_transitions`), a cron loop's stable delay (`jitter`) and where a loop ends (`ends`). The
registry (`loops`) stores schedules; the scheduler runs them; both ask this package the maths.
"""
