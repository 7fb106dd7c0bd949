"""The panel's reads on top of loops.selectors: filters, the composer summary, titles for a page.

The lists themselves come from the selectors the tools use (loop_list "global", loops_targeting), so
the panel shows exactly what loop_list would; this module only narrows them for a page and reads
what a page needs in a constant number of queries (no per-row lookups).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Count, Min, Q, QuerySet

from core.timeutil import from_ms
from loops import humanize
from loops.filters import OVERDUE, Filters, failing_q, filtered_loops, state_q
from loops.models import Loop, LoopState
from loops.selectors import loops_targeting
from monitoring.health import scheduler_health
from sessions_app.models import Preset, ReservedTarget, SessionHeader
from sessions_app.selectors import sessions_get
from sessions_app.titles import fold_title


def panel_loops(filters: Filters, *, now: datetime, global_session_id: str | None) -> QuerySet[Loop]:
    return filtered_loops(filters, now=now, global_session_id=global_session_id)


class CappedPaginator(Paginator):
    """Django's Paginator over a list it counts only as far as a page needs: an exact COUNT over
    a large registry would be a large share of every first page's time.

    `count` stops at `limit` rows: `at_least` times the first power of ten that reaches the end of
    the page asked for, plus one, so whether another page follows is known. `exact` says whether
    `count` is the list's length or a floor (then more than `limit - 1` loops match, and the pages
    are numbered without a last one). A page deeper than `exact_beyond` loops, or below the first,
    is counted exactly.
    """

    object_list: QuerySet[Loop]  # counted by the database, never as a list

    def __init__(
        self, object_list: QuerySet[Loop], per_page: int, *, page, at_least: int = 1000, exact_beyond: int = 10**9
    ):
        super().__init__(object_list, per_page)
        try:
            number = int(page)
        except (TypeError, ValueError):
            number = 1  # Paginator.get_page shows the first page for these
        wanted = number * per_page  # the last loop of the page asked for
        floor = at_least
        while floor < wanted and floor < exact_beyond:
            floor *= 10
        # Below 1, get_page shows the last page: only an exact count knows which that is.
        self.limit = floor + 1 if floor >= wanted and number >= 1 else None

    @cached_property
    def count(self) -> int:
        if self.limit is None:
            return self.object_list.count()
        return self.object_list[: self.limit].count()

    @property
    def exact(self) -> bool:
        return self.limit is None or self.count < self.limit

    @property
    def floor(self) -> str:
        """What an inexact count says there are more than, as people write numbers ("1,000")."""
        return f"{self.count - 1:,}"


def session_titles(session_ids) -> dict[str, str | None]:
    """Folded titles (spec §7) of the given sessions from the durable headers, in one query. With the
    HTTP host these headers are its cache, so a page never waits on the host per row."""
    ids = {sid for sid in session_ids if sid and sid not in {ReservedTarget.SELF, ReservedTarget.NEW}}
    if not ids:
        return {}
    return {session_id: info.title for session_id, info in sessions_get(ids).items()}


# The targets in ID order, one probe of the session_id index each (a loose index scan): each finds
# the first active loop's target after the last one found. A DISTINCT over every loop read all of
# them, ten times the work at 100,000 loops. With each, what its title folds from (spec §7), in
# the same statement, rather than asking for the titles by ID afterwards. Raw SQL
# (STYLE 18): the ORM has no recursive query. `n` bounds the walk: "self" and "new" take a step
# each but are not shown.
_TARGET_SESSIONS_SQL = """
WITH RECURSIVE targets(session_id, n) AS (
    SELECT (SELECT session_id FROM {loops} WHERE NOT state = %s ORDER BY session_id LIMIT 1), 1
    UNION ALL
    SELECT (
        SELECT l.session_id FROM {loops} AS l
        WHERE l.session_id > t.session_id AND NOT l.state = %s ORDER BY l.session_id LIMIT 1
    ), t.n + 1
    FROM targets AS t WHERE t.session_id IS NOT NULL AND t.n < %s
)
SELECT t.session_id, h.user_title, h.generated_title, h.first_prompt
FROM targets AS t LEFT JOIN {headers} AS h ON h.session_id = t.session_id
WHERE t.session_id IS NOT NULL AND t.session_id NOT IN (%s, %s) ORDER BY t.n LIMIT %s
"""


def target_session_choices(limit: int = 200) -> list[tuple[str, str | None]]:
    """Actual sessions that active loops target, the first `limit` by ID, for the target filter:
    each with its folded title (spec §7), None when it has none or the host never reported it."""
    quote = connection.ops.quote_name
    sql = _TARGET_SESSIONS_SQL.format(loops=quote(Loop._meta.db_table), headers=quote(SessionHeader._meta.db_table))
    reserved = [ReservedTarget.SELF.value, ReservedTarget.NEW.value]
    completed = LoopState.COMPLETED.value
    with connection.cursor() as cursor:
        cursor.execute(sql, [completed, completed, limit + len(reserved), *reserved, limit])
        rows = cursor.fetchall()
    return [
        (
            session_id,
            None if user is None else fold_title(user_title=user, generated_title=generated, first_prompt=first),
        )
        for session_id, user, generated, first in rows
    ]


def preset_names(extra=()) -> list[str]:
    """Presets to offer for a `new` target: the registry's mountable ones (the embedded host's own,
    or what the HTTP host cached) and the presets sessions use. The service checks the choice."""
    names = set(Preset.objects.filter(mountable=True).values_list("name", flat=True))
    names.update(name for name in extra if name)
    return sorted(names)


@dataclass(frozen=True)
class ComposerStatus:
    session_id: str
    active: int
    overdue: int
    failed: int  # contract §15: the latest finished run failed (its delivery or its turn)
    paused: int  # will not fire until resumed; an auto-paused loop is one of these
    nearest: datetime | None
    loops: list[Loop]

    @property
    def more(self) -> int:
        return max(0, self.active - len(self.loops))


def composer_status(session_id: str, *, now: datetime, global_session_id: str | None, show: int = 3) -> ComposerStatus:
    """spec §8.1: the current session's loops only — loops_targeting is loop_list({}) for that caller."""
    loops = loops_targeting(session_id, global_session_id=global_session_id)
    summary = loops.aggregate(
        active=Count("loop_id"),
        overdue=Count("loop_id", filter=state_q(OVERDUE, now)),
        failed=Count("loop_id", filter=failing_q()),
        paused=Count("loop_id", filter=Q(state=LoopState.PAUSED)),
        # The nearest run still ahead (or just due); late ones are what `overdue` counts.
        nearest=Min("next_at", filter=~state_q(OVERDUE, now)),
    )
    return ComposerStatus(session_id=session_id, loops=list(loops[:show]), **summary)


def scheduler_status(now: datetime) -> dict:
    """contract §4 health (a scheduler is alive if it ticked in the last 60 s), plus, when none is,
    when the last one was seen: the first thing to know when "my loop didn't fire"."""
    health = scheduler_health(now)  # one query, the last tick included
    if not health["alive"]:
        last = health.get("last_tick_at")
        health["last_seen"] = humanize.ago(from_ms(last), now) if last is not None else None
    return health
