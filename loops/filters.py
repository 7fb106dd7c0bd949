"""The filters a person narrows the loop registry with (state, target, session, text): one home for
the panel's list and the operator API's `GET /api/loops`, which DSH Web's Loops panel reads.

The lists themselves are the selectors the tools use (loop_list "global", loops_targeting), so a
filtered list shows exactly what loop_list would, narrowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

from core.validation import is_identifier
from loops.models import Loop, LoopState, RunStatus
from loops.presenters import OVERDUE_AFTER
from loops.selectors import loop_list, loops_targeting
from sessions_app.models import ReservedTarget

# The states a person can filter by: the spec §4 five and contract §9's paused, plus "problems" (a
# failed last run on a loop that is still scheduled — recurring loops stay "scheduled" after a failed
# occurrence).
OVERDUE, LAST_FAILED, SESSION = "overdue", "last_failed", "session"
STATE_FILTERS = {
    LoopState.SCHEDULED: "Scheduled",
    LoopState.RUNNING: "Running",
    OVERDUE: "Overdue",
    LoopState.PAUSED: "Paused",
    LoopState.FAILED: "Failed",
    LAST_FAILED: "Last run failed",
    LoopState.COMPLETED: "Completed (history)",
}
TARGET_FILTERS = {
    ReservedTarget.SELF: "self (global interface)",
    ReservedTarget.NEW: "new (fresh session)",
    SESSION: "An existing session",
}
TEXT_FILTER_MAX = 200


def state_q(state: str, now: datetime) -> Q:
    """The database form of presenters.loop_state: overdue = scheduled with next_at more than
    OVERDUE_AFTER in the past (spec §4, contract §3). tests/panel/test_queries.py checks that the two
    agree on every state, so a change to one without the other fails there."""
    late = Q(state=LoopState.SCHEDULED, next_at__lt=now - OVERDUE_AFTER)
    if state == OVERDUE:
        return late
    if state == LoopState.SCHEDULED:
        return Q(state=LoopState.SCHEDULED) & ~late
    if state == LAST_FAILED:
        return _last_failed()
    return Q(state=state)  # running, paused (never overdue: it has no next_at), failed, completed


def failing_q() -> Q:
    """A loop a person should look at for failures: failed, or its latest finished run failed."""
    return Q(state=LoopState.FAILED) | _last_failed()


def _last_failed() -> Q:
    return Q(last_result=RunStatus.FAILED)


@dataclass(frozen=True)
class Filters:
    state: str = ""
    target: str = ""
    session: str = ""  # one session's loops: what loop_list({"session_id": id}) lists
    q: str = ""

    @classmethod
    def from_query(cls, params) -> Filters:
        """Lenient, for the panel's query string: a value it does not know is no filter."""
        state = params.get("state", "")
        target = params.get("target", "")
        session = params.get("session", "").strip()
        return cls(
            state=state if state in STATE_FILTERS else "",
            target=target if target in TARGET_FILTERS else "",
            session=session if is_identifier(session) else "",
            q=params.get("q", "").replace("\x00", "").strip()[:TEXT_FILTER_MAX],
        )

    @property
    def active(self) -> bool:
        return bool(self.state or self.target or self.session or self.q)


def filtered_loops(filters: Filters, *, now: datetime, global_session_id: str | None) -> QuerySet[Loop]:
    if filters.state == LoopState.COMPLETED:
        # Completed `after` loops leave every loop_list (spec §4) but keep their history: a person
        # can still see them on request, most recent first.
        loops = Loop.objects.filter(state=LoopState.COMPLETED).order_by("-last_run_at", "-created_at", "loop_id")
        if filters.session:
            loops = loops.filter(session_id=filters.session)
    elif filters.session:
        loops = loops_targeting(filters.session, global_session_id=global_session_id)
    else:
        loops = loop_list(scope=ReservedTarget.GLOBAL)
    if filters.state and filters.state != LoopState.COMPLETED:
        loops = loops.filter(state_q(filters.state, now))
    if filters.target == SESSION:
        loops = loops.exclude(session_id__in=[ReservedTarget.SELF, ReservedTarget.NEW])
    elif filters.target:
        loops = loops.filter(session_id=filters.target)
    if filters.q:
        loops = loops.filter(Q(prompt__icontains=filters.q) | Q(loop_id=filters.q))
    return loops
