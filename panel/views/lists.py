"""The lists: the panel's loop list (spec §8.1, §8.2) and one session's composer status (spec §8.1)."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_http_methods

from core.validation import is_identifier
from loops import humanize
from loops.filters import STATE_FILTERS, TARGET_FILTERS, Filters
from loops.humanize import loop_zone, preview
from loops.presenters import loop_state
from sessions_app.hosts import get_host, global_session_id

from .. import queries
from ..rows import loop_row, loop_urls_maker, when
from .common import back_here, global_title, health, query, staff_required

PAGE_SIZE = 50


@staff_required
@require_http_methods(["GET", "HEAD"])
def index(request):
    now = timezone.now()
    filters = Filters.from_query(request.GET)
    number = request.GET.get("page")
    global_session = get_host().global_session()
    global_id = global_session.session_id if global_session is not None else None
    listed = queries.panel_loops(filters, now=now, global_session_id=global_id)
    page = queries.CappedPaginator(listed, PAGE_SIZE, page=number).get_page(number)
    loops = list(page.object_list)
    filter_sessions = queries.target_session_choices()
    titles = dict(filter_sessions)
    titles.update(queries.session_titles(({loop.session_id for loop in loops} | {filters.session}) - titles.keys()))
    urls = loop_urls_maker()
    params = {"state": filters.state, "target": filters.target, "session": filters.session, "q": filters.q}
    context = {
        "now": now,
        "health": health(now),
        "filters": filters,
        "states": STATE_FILTERS,
        "targets": TARGET_FILTERS,
        "filter_sessions": [(sid, title or sid) for sid, title in filter_sessions],
        "session_title": titles.get(filters.session),
        "page": page,
        "rows": [
            loop_row(loop, now=now, titles=titles, global_title=global_title(global_session), urls=urls)
            for loop in loops
        ],
        "prev_query": query(params, page=page.previous_page_number()) if page.has_previous() else None,
        "next_query": query(params, page=page.next_page_number()) if page.has_next() else None,
        "new_query": query({"session": filters.session}),
        **back_here(request),
        "highlight": request.GET.get("created", ""),
        "has_global_session": global_session is not None,
    }
    return render(request, "panel/index.html", context)


@staff_required
@require_http_methods(["GET", "HEAD"])
@xframe_options_exempt  # embeddable anywhere: it has no controls to click-jack, only a link
def session_status(request, session_id: str):
    """spec §8.1: a compact view of one session's loops, embeddable in its composer.

    ?fragment=1 returns the bare partial for a host page that inserts it; without it a tiny
    document for an <iframe> that styles itself and keeps its countdown ticking.
    """
    if not is_identifier(session_id):
        raise Http404("No such session.")
    now = timezone.now()
    status = queries.composer_status(session_id, now=now, global_session_id=global_session_id())
    nearest_zone = settings.TIME_ZONE
    context = {
        "now": now,
        "status": status,
        "nearest": when(status.nearest, nearest_zone, now),
        "nearest_countdown": humanize.countdown(status.nearest, now),
        "items": [
            {
                "loop_id": loop.loop_id,
                "preview": preview(loop.prompt, 60),
                "state": loop_state(loop, now),
                "countdown": humanize.countdown(loop.next_at, now),
                "next_run": when(loop.next_at, loop_zone(loop), now),
                "schedule": humanize.schedule_words(loop, now=now, host_tz=settings.TIME_ZONE)[0],
            }
            for loop in status.loops
        ],
        "panel_url": reverse("panel:index") + query({"session": session_id}),
        "new_url": reverse("panel:create") + query({"session": session_id}),
        "health": health(now),
    }
    template = "panel/_status.html" if request.GET.get("fragment") else "panel/status.html"
    return render(request, template, context)
