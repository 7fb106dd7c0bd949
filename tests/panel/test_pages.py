"""The panel pages over the Django test client: auth, listing, filters, pagination, query counts."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from loops.models import Loop, LoopRun, LoopState, SchedulerHeartbeat
from tests.conftest import create_loop

from .conftest import session

pytestmark = pytest.mark.django_db

PAGES = ["/panel/", "/panel/new", "/panel/sessions/ses_a/status"]


# --- auth (contract §8) --------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_users_are_sent_to_the_admin_login(client, world, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


def test_anonymous_users_are_sent_to_login_from_detail_and_delete(client, make_loop):
    loop = make_loop()
    for path in (f"/panel/loops/{loop.loop_id}/", f"/panel/loops/{loop.loop_id}/delete"):
        assert client.get(path)["Location"].startswith("/admin/login/")
    response = client.post(f"/panel/loops/{loop.loop_id}/delete")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert Loop.objects.filter(loop_id=loop.loop_id).exists()


@pytest.mark.parametrize("path", PAGES)
def test_signed_in_non_staff_users_are_refused(plain_client, world, path):
    response = plain_client.get(path)
    assert response.status_code == 403
    assert b"Staff only" in response.content


def test_non_staff_cannot_create_or_delete(plain_client, make_loop):
    loop = make_loop()
    assert plain_client.post(f"/panel/loops/{loop.loop_id}/delete").status_code == 403
    response = plain_client.post(
        "/panel/new", {"prompt": "x", "target": "self", "kind": "every", "every_amount": "1", "every_unit": "60"}
    )
    assert response.status_code == 403
    assert list(Loop.objects.values_list("loop_id", flat=True)) == [loop.loop_id]


@pytest.mark.parametrize("path", PAGES)
def test_staff_users_get_the_pages(staff_client, world, path):
    assert staff_client.get(path).status_code == 200


def test_the_site_root_leads_to_the_panel(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"] == "/panel/"


# --- the list ---------------------------------------------------------------------------------------


def test_each_row_shows_preview_schedule_target_state_next_and_last_run(staff_client, make_loop):
    now = timezone.now()
    every = make_loop("Check the deployment status", session_id="self")
    cron = make_loop(
        "Morning report", schedule={"kind": "cron", "expr": "30 9 * * 1-5", "tz": "Asia/Shanghai"}, session_id="ses_b"
    )
    new = make_loop(
        "Review the open PRs", schedule={"kind": "after", "after_seconds": 300}, session_id="new", preset="reviewer"
    )
    untitled = make_loop("Poke", session_id="ses_untitled")
    Loop.objects.filter(loop_id=every.loop_id).update(
        last_run_at=now - timedelta(minutes=3), last_result="failed", last_error="Host unreachable: connection refused"
    )
    html = staff_client.get("/panel/").content.decode()
    assert "Check the deployment status" in html
    assert "every 10 minutes" in html
    assert 'title="cron 30 9 * * 1-5 in Asia/Shanghai"' in html and "09:30 on weekdays, Asia/Shanghai" in html
    assert "once, in 5 minutes" in html
    # Targets: self (with the global interface), new + preset, a title with its ID, an ID fallback.
    assert "global interface · Interface" in html
    assert "preset reviewer" in html
    assert "Nightly data sync" in html and "ses_b" in html
    assert '<span class="target-session" title="ses_untitled">ses_untitled</span>' in html
    # Next run: local time in the loop's zone, machine time for the countdown.
    cron.refresh_from_db()
    local = cron.next_at.astimezone(__import__("zoneinfo").ZoneInfo("Asia/Shanghai"))
    assert f"{local:%H:%M} CST" in html and "09:30 CST" in html
    assert f'datetime="{cron.next_at.astimezone(UTC).isoformat(timespec="milliseconds")}"' in html
    # Last run and last error.
    # The page is rendered a moment after `now`: "3 min ago", or a few seconds more on a slow machine.
    assert re.search(r"3 min( \d+ s)? ago", html) and "Host unreachable: connection refused" in html
    for loop in (every, cron, new, untitled):
        assert f'id="{loop.loop_id}"' in html
        assert f"/panel/loops/{loop.loop_id}/delete" in html


def test_completed_loops_leave_the_list_but_can_be_shown(staff_client, make_loop):
    done = make_loop("Done already", schedule={"kind": "after", "after_seconds": 60})
    Loop.objects.filter(loop_id=done.loop_id).update(
        state=LoopState.COMPLETED, next_at=None, last_run_at=timezone.now(), last_result="delivered"
    )
    active = make_loop("Still here")
    html = staff_client.get("/panel/").content.decode()
    assert active.loop_id in html and done.loop_id not in html
    html = staff_client.get("/panel/?state=completed").content.decode()
    assert done.loop_id in html and active.loop_id not in html


def test_filter_by_state(staff_client, make_loop):
    on_time = make_loop("on time")
    late = make_loop("late")
    failed = make_loop("failed", schedule={"kind": "after", "after_seconds": 60})
    Loop.objects.filter(loop_id=late.loop_id).update(next_at=timezone.now() - timedelta(minutes=5))
    Loop.objects.filter(loop_id=failed.loop_id).update(state=LoopState.FAILED, last_result="failed")

    def shown(query):
        html = staff_client.get("/panel/" + query).content.decode()
        return {loop.loop_id for loop in (on_time, late, failed) if f'id="{loop.loop_id}"' in html}

    assert shown("") == {on_time.loop_id, late.loop_id, failed.loop_id}
    assert shown("?state=scheduled") == {on_time.loop_id}
    assert shown("?state=overdue") == {late.loop_id}
    assert shown("?state=failed") == {failed.loop_id}
    assert shown("?state=last_failed") == {failed.loop_id}
    assert shown("?state=bogus") == shown("")  # an unknown filter value is ignored, not an error


def test_filter_by_target_and_session(staff_client, make_loop):
    to_self = make_loop("to self", session_id="self")
    to_new = make_loop("to new", session_id="new")
    to_a = make_loop("to a", session_id="ses_a")
    to_global = make_loop("to the global interface by ID", session_id="ses_global")
    everything = {to_self.loop_id, to_new.loop_id, to_a.loop_id, to_global.loop_id}

    def shown(query):
        html = staff_client.get("/panel/" + query).content.decode()
        return {loop_id for loop_id in everything if f'id="{loop_id}"' in html}

    assert shown("?target=self") == {to_self.loop_id}
    assert shown("?target=new") == {to_new.loop_id}
    assert shown("?target=session") == {to_a.loop_id, to_global.loop_id}
    assert shown("?session=ses_a") == {to_a.loop_id}
    # loop_list({"session_id": X}) semantics: the global interface's loops include `self` ones.
    assert shown("?session=ses_global") == {to_self.loop_id, to_global.loop_id}
    assert shown("?session=ses_global&target=self") == {to_self.loop_id}


def test_search_over_prompts_and_loop_ids(staff_client, make_loop):
    deploy = make_loop("Check the DEPLOYMENT status")
    other = make_loop("Summarise the inbox")
    html = staff_client.get("/panel/?q=deployment").content.decode()
    assert deploy.loop_id in html and other.loop_id not in html
    html = staff_client.get(f"/panel/?q={other.loop_id}").content.decode()
    assert other.loop_id in html and f'id="{deploy.loop_id}"' not in html
    assert "No loops match" in staff_client.get("/panel/?q=nothing-like-this").content.decode()


def bulk_loops(count: int, *, session_id: str = "ses_a") -> None:
    now = timezone.now()
    Loop.objects.bulk_create(
        [
            Loop(
                loop_id=f"loop_{i:06d}",
                prompt=f"Prompt number {i}",
                kind="every",
                every_seconds=600,
                session_id=session_id if i % 3 else "self",
                created_by_session_id="ses_global",
                created_at=now,
                next_at=now + timedelta(seconds=i),
                state=LoopState.SCHEDULED,
            )
            for i in range(count)
        ],
        batch_size=1000,
    )


def test_pagination_keeps_filters_and_clamps_out_of_range_pages(staff_client, world):
    bulk_loops(120)
    html = staff_client.get("/panel/?q=Prompt").content.decode()
    assert "Page 1 of 3" in html and "loop_000000" in html and "loop_000050" not in html
    assert 'href="?q=Prompt&amp;page=2"' in html
    html = staff_client.get("/panel/?q=Prompt&page=2").content.decode()
    assert "loop_000050" in html and "loop_000049" not in html
    html = staff_client.get("/panel/?page=99").content.decode()
    assert "Page 3 of 3" in html and "loop_000119" in html
    assert staff_client.get("/panel/?page=abc").status_code == 200


QUERIES_10K = [
    "",
    "?page=150",
    "?q=number 9999",
    "?state=overdue",
    "?state=scheduled&target=self",
    "?session=ses_a&page=3",
    "?session=ses_global",
    "?target=session&q=Prompt",
]


def test_ten_thousand_loops_cost_a_constant_number_of_queries(staff_client, world, django_assert_max_num_queries):
    bulk_loops(10_000)
    for query in QUERIES_10K:
        # session + user, scheduler health (2-3), distinct targets, titles, global interface (1-2),
        # count, page: the same handful whatever the page holds, no query per row.
        with django_assert_max_num_queries(11):
            response = staff_client.get("/panel/" + query)
        assert response.status_code == 200, query
    assert "loop_007450" in staff_client.get("/panel/?page=150").content.decode()


def test_the_health_banner_shows_only_when_no_scheduler_is_alive(staff_client, world):
    banner = "No scheduler is running"
    html = staff_client.get("/panel/").content.decode()
    assert banner in html and "No scheduler has checked in yet" in html
    now = timezone.now()
    SchedulerHeartbeat.objects.create(
        instance_id="a", hostname="h", pid=1, started_at=now, last_tick_at=now - timedelta(minutes=5)
    )
    html = staff_client.get("/panel/").content.decode()
    assert banner in html and "The last one checked in 5 min ago" in html
    SchedulerHeartbeat.objects.filter(instance_id="a").update(last_tick_at=now)
    assert banner not in staff_client.get("/panel/").content.decode()
    assert banner not in staff_client.get("/panel/new").content.decode()


# --- detail ---------------------------------------------------------------------------------------


def test_detail_shows_the_next_five_fire_times_across_a_dst_change(staff_client, world):
    before_spring_forward = datetime(2025, 3, 27, 12, 0, tzinfo=UTC)
    loop = create_loop(
        {"kind": "cron", "expr": "30 2 * * *", "tz": "Europe/Berlin"},
        prompt="Standup",
        target="ses_a",
        at=before_spring_forward,
    )
    import time_machine

    with time_machine.travel(before_spring_forward + timedelta(minutes=1), tick=False):
        html = staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
    # 02:30 does not exist in Berlin on 30 March 2025: that day is skipped (docs/tools-and-api.md "DST").
    assert "2025-03-28 02:30:00 CET (UTC+01:00)" in html
    assert "2025-03-29 02:30:00 CET (UTC+01:00)" in html
    assert "2025-03-30 02:30" not in html
    assert "2025-03-31 02:30:00 CEST (UTC+02:00)" in html
    assert "2025-04-01 02:30:00 CEST (UTC+02:00)" in html
    assert "2025-04-02 02:30:00 CEST (UTC+02:00)" in html


def test_detail_shows_run_history_and_survives_deletion(staff_client, make_loop):
    from loops.models import LoopRun

    loop = make_loop("Watch the queue", session_id="new", preset="reviewer")
    now = timezone.now()
    LoopRun.objects.create(
        run_id="run_1",
        loop_id=loop.loop_id,
        occurrence_key=f"{loop.loop_id}@1",
        scheduled_at=now - timedelta(minutes=10),
        status="delivered",
        attempt=1,
        missed=4,
        target_session_id="ses_fresh",
        claimed_at=now,
        fallback="preset default (reviewer gone)",
    )
    LoopRun.objects.create(
        run_id="run_2",
        loop_id=loop.loop_id,
        occurrence_key=f"{loop.loop_id}@2",
        scheduled_at=now - timedelta(minutes=5),
        status="failed",
        attempt=6,
        claimed_at=now,
        error="Host timed out after 10 s",
    )
    html = staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
    assert html.index('id="run_2"') < html.index('id="run_1"')  # newest first
    for text in (
        "ses_fresh",
        ">4<",
        "preset default (reviewer gone)",
        "Host timed out after 10 s",
        "attempt 6",
        "delivered",
        "failed",
        "Watch the queue",
        "every 10 minutes",
    ):
        assert text in html, text
    staff_client.post(f"/panel/loops/{loop.loop_id}/delete")
    response = staff_client.get(f"/panel/loops/{loop.loop_id}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "This loop no longer exists" in html and 'id="run_1"' in html


def test_detail_of_an_unknown_loop_is_404(staff_client, world):
    assert staff_client.get("/panel/loops/loop_nope/").status_code == 404


def test_the_stylesheet_and_script_are_served_without_collectstatic(client):
    # whitenoise serves panel/static/ straight from the finders (settings.WHITENOISE_USE_FINDERS): `make run`
    # needs no collectstatic step, and nothing is fetched from a CDN.
    for path in ("/static/panel/panel.css", "/static/panel/panel.js"):
        response = client.get(path)
        assert response.status_code == 200, path
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert b"dshloop panel" in body


def test_target_sessions_show_their_title_beside_their_id(staff_client, make_loop):
    session("ses_fresh", generated_title="Overnight alert summary", status="idle")
    to_a = make_loop("Check the release", session_id="ses_a")
    to_self = make_loop("Morning report", session_id="self")
    fresh = make_loop("Watch the queue", session_id="new")
    now = timezone.now()
    for loop, target in ((to_a, "ses_a"), (to_self, "ses_global"), (fresh, "ses_fresh")):
        LoopRun.objects.create(
            run_id=f"run_{target}",
            loop_id=loop.loop_id,
            occurrence_key=f"{loop.loop_id}@1",
            scheduled_at=now - timedelta(minutes=10),
            status="delivered",
            attempt=1,
            target=loop.session_id,
            target_session_id=target,
            claimed_at=now,
        )
    listed = staff_client.get("/panel/").content.decode()
    assert '<span class="target-session" title="ses_a">Release review</span>' in listed
    assert '<span class="mono subtle small">ses_a</span>' in listed
    assert "global interface · Interface (ses_global)" in listed  # `self`: the global session, titled
    for loop, title, target in (
        (to_a, "Release review", "ses_a"),
        (to_self, "Interface", "ses_global"),
        (fresh, "Overnight alert summary", "ses_fresh"),
    ):
        page = staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
        row = page[page.index(f'id="run_{target}"') :]
        row = row[: row.index("</tr>")]
        # Each run's session, by its title and its ID.
        assert f'<span class="run-target-title">{title}</span> <span class="mono subtle small">{target}</span>' in row
    page = staff_client.get(f"/panel/loops/{to_a.loop_id}/").content.decode()
    assert 'Release review <span class="mono subtle small">ses_a</span>' in page  # the loop's target
