"""What every page family of the panel uses: the staff guard, the refusal of text that is not
UTF-8, where a page's controls come back to, and the small facts each page shows."""

from __future__ import annotations

from functools import wraps
from urllib.parse import quote, urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import Http404
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme

from core.validation import is_identifier

from .. import queries, utf8


def staff_required(view):
    """contract §8: staff only. Anonymous -> the admin login (then back); signed in but not staff -> 403.

    Then a query string that is not valid UTF-8 is refused (400) before the view reads it: Django
    would hand it over with U+FFFD in place of the bad bytes, e.g. `?session=%FF` as the session ID
    U+FFFD. Form bodies are checked where they are read (create, delete).
    """

    @wraps(view)
    def guarded(request, *args, **kwargs):
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        if not (user.is_active and user.is_staff):
            return render(request, "panel/forbidden.html", status=403)
        undecodable = utf8.undecodable_query(request)
        if undecodable:
            return not_utf8(request, undecodable, where="address")
        return view(request, *args, **kwargs)

    return guarded


def not_utf8(request, fields: list[str], *, where: str):
    return render(request, "panel/bad_request.html", {"fields": fields, "where": where}, status=400)


def health(now):
    return queries.scheduler_status(now)


def global_title(global_session) -> str | None:
    """How a `self` target names the global interface session: its title with its ID, or the ID."""
    if global_session is None:
        return None
    if global_session.title:
        return f"{global_session.title} ({global_session.session_id})"
    return global_session.session_id


def back_here(request, *, after_delete: str | None = None) -> dict:
    """Where the controls (_controls.html) come back to: `here`, this page, and as the `next`
    parameter of their links, URL-encoded once for all of a list's rows (as the urlencode filter
    would)."""
    here = request.get_full_path()
    return {"here": here, "next_q": quote(here), "delete_next_q": quote(after_delete or here)}


def query(params: dict, **changes) -> str:
    merged = {**{k: v for k, v in params.items() if v}, **changes}
    merged = {k: v for k, v in merged.items() if v not in (None, "")}
    return "?" + urlencode(merged) if merged else "?"


def safe_next(request, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def check_loop_id(loop_id: str):
    if not is_identifier(loop_id):
        raise Http404("No such loop.")


def gone(loop_id: str) -> str:
    return f"There is no loop {loop_id} any more: it was deleted."
