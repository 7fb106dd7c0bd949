"""The panel in a real headless Chromium (Debian's, via Selenium and chromedriver) against a live server.

Select with `-m browser`, skip with `-m "not browser"`. Screenshots go to a temp dir, or to
docs/screenshots with DSHLOOP_SCREENSHOTS=1 (how the committed pictures are refreshed).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from loops import humanize
from loops.events import Actor
from loops.models import ActorKind, Loop, LoopEvent, LoopRun, SchedulerHeartbeat
from loops.services import edit, lifecycle
from tests.conftest import create_loop, every
from timing import schedules

from .conftest import log_in, row

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def newest_loop() -> Loop:
    return Loop.objects.order_by("-created_at").first()


def next_weekday_0930_shanghai(after: datetime) -> datetime:
    zone = ZoneInfo("Asia/Shanghai")
    day = after.astimezone(zone).date()
    while True:
        candidate = datetime(day.year, day.month, day.day, 9, 30, tzinfo=zone)
        if candidate > after and candidate.weekday() < 5:
            return candidate.astimezone(UTC)
        day += timedelta(days=1)


def test_create_each_kind_and_target_see_it_listed_open_it_delete_it(page):
    log_in(page)
    assert "No loops yet" in page.text

    # --- a validation error, inline, with the contract's message -----------------------------------
    page.find("#new-loop").click()
    page.find("#loop-form")
    # Each kind as timing.schedules describes it; the chosen kind's amount reads on from its label.
    kinds = [card.text for card in page.all('label.radio-card:has(input[name="kind"])')]
    assert kinds == [schedule_type.label for schedule_type in schedules.SCHEDULE_TYPES]
    assert page.find('label[for="id_every_amount"]').text == "Every"
    # The amount is a short box beside its unit (8rem), not a field as wide as the prompt.
    assert page.find("#id_every_amount").rect["width"] <= 140
    assert not page.find(".when-new").is_displayed()  # the preset select only for `new`
    assert not page.find(".kind-cron").is_displayed()
    page.type("prompt", "Morning report")
    page.choose("kind", "cron")
    assert page.find(".kind-cron").is_displayed()
    assert page.find('select[name="tz"]').get_attribute("value") == "Europe/Berlin"  # the browser's zone
    page.type("cron_expr", "61 9 * * 1-5")
    page.submit("#create-loop")
    error = page.find("#id_cron_expr-errors").text
    assert error.startswith("Cron expression '61 9 * * 1-5' is not valid")
    assert page.find(".kind-cron").is_displayed()  # the user's choice and input survive the round trip
    assert page.find('[name="prompt"]').get_attribute("value") == "Morning report"
    assert not Loop.objects.exists()

    # --- cron, in a chosen zone, to an existing session picked by its title --------------------------
    page.type("cron_expr", "30 9 * * 1-5")
    page.select("tz", "Asia/Shanghai")
    page.choose("target", "session")
    assert page.find(".when-session").is_displayed()
    options = {o.get_attribute("value"): o.text for o in page.all('select[name="session"] option')}
    assert options["ses_b"] == "Nightly data sync · ses_b (cold)" and options["ses_untitled"] == "ses_untitled (idle)"
    page.select("session", "ses_b")
    page.submit("#create-loop")
    cron = newest_loop()
    assert (cron.kind, cron.cron_expr, cron.tz, cron.session_id) == ("cron", "30 9 * * 1-5", "Asia/Shanghai", "ses_b")
    assert cron.next_at == next_weekday_0930_shanghai(cron.created_at)
    listed = row(page, cron.loop_id)
    assert "09:30 on weekdays, Asia/Shanghai" in listed.text
    assert (
        listed.find_element("css selector", ".schedule").get_attribute("title") == "cron 30 9 * * 1-5 in Asia/Shanghai"
    )
    assert "Nightly data sync" in listed.text
    next_cell = listed.find_element("css selector", ".cell-next")
    assert humanize.local_time(cron.next_at, "Asia/Shanghai", now=timezone.now()) in next_cell.text
    assert "09:30 CST" in next_cell.text

    # --- every 10 minutes, to self -------------------------------------------------------------------
    page.find("#new-loop").click()
    page.type("prompt", "Check the deployment status")
    page.choose("target", "self")
    page.choose("kind", "every")
    page.type("every_amount", "10")
    page.select("every_unit", "60")
    page.submit("#create-loop")
    every = newest_loop()
    assert (every.kind, every.every_seconds, every.session_id) == ("every", 600, "self")
    assert every.next_at == every.created_at + timedelta(minutes=10)
    listed = row(page, every.loop_id)
    assert "every 10 minutes" in listed.text and "self" in listed.text
    countdown = listed.find_element("css selector", "time[data-countdown]")
    assert countdown.get_attribute("datetime") == every.next_at.isoformat(timespec="milliseconds")
    first = countdown.text
    assert re.fullmatch(r"in (10 min|9 min \d{1,2} s)", first), first
    page.wait(lambda d: countdown.text != first, "the countdown does not tick")  # live, from next_at

    # --- once, after 5 minutes, to a fresh session with a preset ----------------------------------------
    page.find("#new-loop").click()
    page.type("prompt", "Review the open PRs")
    page.choose("target", "new")
    assert page.find(".when-new").is_displayed()
    page.select("preset", "reviewer")
    page.choose("kind", "after")
    page.type("after_amount", "5")
    page.select("after_unit", "60")
    page.submit("#create-loop")
    after = newest_loop()
    assert (after.kind, after.after_seconds, after.session_id, after.preset) == ("after", 300, "new", "reviewer")
    listed = row(page, after.loop_id)
    assert "once, in 5 minutes" in listed.text and "preset reviewer" in listed.text
    assert re.search(r"in (5 min|4 min \d{1,2} s)", listed.text)

    # --- the current local session, when the panel is opened for one -------------------------------------
    page.go("/panel/?session=ses_a")
    assert "Loops for Release review" in page.text
    page.find("#new-loop").click()
    assert page.find('input[name="target"][value="current"]').is_selected()
    page.type("prompt", "Summarise the review")
    page.choose("kind", "every")
    page.type("every_amount", "1")
    page.select("every_unit", "3600")
    page.submit("#create-loop")
    current = newest_loop()
    assert (current.session_id, current.every_seconds, current.created_by_session_id) == ("ses_a", 3600, "ses_global")
    assert page.path.startswith("/panel/?session=ses_a")
    assert "every hour" in row(page, current.loop_id).text
    assert not page.all(f'tr[id="{every.loop_id}"]')  # only ses_a's loops in this view

    # --- detail: run history and the next five fire times ------------------------------------------------
    page.go("/panel/")
    row(page, cron.loop_id).find_element("css selector", ".prompt-link").click()
    page.wait(lambda d: f"/panel/loops/{cron.loop_id}/" in d.current_url)
    upcoming = [li.text for li in page.all(".upcoming li")]
    assert len(upcoming) == 5 and all("09:30:00 CST (UTC+08:00)" in text for text in upcoming)
    assert "No runs yet." in page.text

    # --- delete, with confirmation -------------------------------------------------------------------------
    page.go("/panel/")
    row(page, every.loop_id).find_element("css selector", '.cell-actions [data-action="delete"]').click()
    page.wait(lambda d: "/delete" in d.current_url)
    assert "Delete this loop?" in page.text and "Check the deployment status" in page.text
    page.submit("#confirm-delete")
    assert page.path == "/panel/"
    assert f"Deleted {every.loop_id}." in page.text
    assert not page.all(f'tr[id="{every.loop_id}"]')
    assert not Loop.objects.filter(loop_id=every.loop_id).exists()
    assert Loop.objects.count() == 3


def test_the_layout_becomes_cards_on_a_phone(page):
    create_loop(every(600), prompt="Check the deployment status", target="self")
    log_in(page)
    cdp = page.driver.execute_cdp_cmd
    cdp("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    try:
        page.go("/panel/")
        assert not page.find("table.loops thead").is_displayed()
        cell = page.find("td.cell-schedule")
        assert (
            page.driver.execute_script("return getComputedStyle(arguments[0], '::before').content", cell)
            == '"Schedule"'
        )
        width = page.driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= 390  # no sideways scrolling
    finally:
        cdp("Emulation.clearDeviceMetricsOverride", {})


def seed_for_pictures():
    """A realistic registry for the screenshots: every kind, every target, some history."""
    from sessions_app.services import session_upsert

    session_upsert(session_id="ses_9f2c1e", changes={"first_prompt": "Keep the staging deploy green", "status": "idle"})
    now = timezone.now()

    def make(prompt, schedule, session_id, preset=None, *, last_run=None, result="delivered", error=""):
        loop = create_loop(schedule, prompt=prompt, target=session_id, preset=preset)
        if last_run is not None:
            Loop.objects.filter(loop_id=loop.loop_id).update(
                last_run_at=now - last_run, last_result=result, last_error=error
            )
        return loop

    standup = make(
        "Post the stand-up summary from yesterday's merged PRs and open incidents.",
        {"kind": "cron", "expr": "30 9 * * 1-5", "tz": "Asia/Shanghai"},
        "self",
    )
    make(
        "Check the deployment status and roll back if the error rate is above 2 %.",
        {"kind": "every", "every_seconds": 600},
        "ses_a",
        last_run=timedelta(minutes=4),
    )
    make(
        "Review the open pull requests labelled needs-review.",
        {"kind": "after", "after_seconds": 1800},
        "new",
        "reviewer",
    )
    make(
        "Run the nightly data sync and report rows changed.",
        {"kind": "cron", "expr": "0 2 * * *", "tz": "Europe/Berlin"},
        "ses_b",
        last_run=timedelta(hours=7),
        result="failed",
        error="Session ses_b could not be resumed: host timed out after 10 s",
    )
    ping = make(
        "Ping me if the staging build is red.",
        {"kind": "every", "every_seconds": 3600},
        "ses_9f2c1e",
        last_run=timedelta(minutes=38),
    )
    make(
        "Summarise new issues in the tracker.",
        {"kind": "cron", "expr": "0 */4 * * *"},
        "ses_untitled",
        last_run=timedelta(hours=3),
    )
    Loop.objects.filter(loop_id=standup.loop_id).update(created_at=now - timedelta(days=8))  # old enough for a history
    shanghai = ZoneInfo("Asia/Shanghai")
    at_0930 = [
        datetime(d.year, d.month, d.day, 9, 30, tzinfo=shanghai).astimezone(UTC)
        for d in (now.astimezone(shanghai).date() - timedelta(days=n) for n in range(8))
        if d.weekday() < 5
    ]
    past_runs = [t for t in at_0930 if t < now][:3]
    for days, scheduled in enumerate(past_runs, start=1):
        LoopRun.objects.create(
            run_id=f"run_shot{days}",
            loop_id=standup.loop_id,
            occurrence_key=f"{standup.loop_id}@{days}",
            scheduled_at=scheduled,
            status="delivered",
            attempt=1,
            missed=2 if days == 3 else 0,
            target_session_id="ses_global",
            claimed_at=scheduled,
            started_at=scheduled,
            finished_at=scheduled,
            fallback="profile default preset (global interface had none)" if days == 3 else "",
        )
    Loop.objects.filter(loop_id=standup.loop_id).update(last_run_at=past_runs[0], last_result="delivered")
    # A name and a new prompt (revision 2) two days ago, so the runs since then record
    # revision 2; a Run now at that revision; and a paused loop.
    ada = Actor(ActorKind.USER, "ada")
    LoopEvent.objects.filter(loop_id=standup.loop_id).update(at=now - timedelta(days=8))
    edited_at = now - timedelta(days=2)
    edit.loop_edit(
        loop_id=standup.loop_id,
        changes={
            "name": "Stand-up summary",
            "prompt": "Post the stand-up summary from yesterday's merged PRs, open incidents and on-call notes.",
        },
        actor=ada,
        now=edited_at,
    )
    LoopRun.objects.filter(loop_id=standup.loop_id, scheduled_at__gt=edited_at).update(revision=2)
    manual_at = now - timedelta(minutes=25)
    LoopRun.objects.create(
        run_id="run_shotmanual",
        loop_id=standup.loop_id,
        occurrence_key=f"{standup.loop_id}@manual:run_shotmanual",
        scheduled_at=manual_at,
        status="delivered",
        attempt=1,
        target_session_id="ses_global",
        claimed_at=manual_at,
        started_at=manual_at,
        finished_at=manual_at,
        revision=2,
        manual=True,
    )
    LoopEvent.objects.create(
        loop_id=standup.loop_id, at=manual_at, kind="run_now", actor_kind="user", actor_id="ada", revision=2
    )
    lifecycle.loop_pause(loop_id=ping.loop_id, actor=ada, now=now - timedelta(minutes=50))
    SchedulerHeartbeat.objects.create(
        instance_id="shot", hostname="laptop", pid=4242, started_at=now, last_tick_at=now + timedelta(minutes=10)
    )
    return standup


def test_screenshots_of_panel_detail_edit_and_composer_status(page, screenshot_dir):
    standup = seed_for_pictures()
    log_in(page)
    page.go("/panel/")
    assert "No scheduler is running" not in page.text
    shots = [page.shoot(screenshot_dir / "panel.png", width=1280)]
    shots.append(page.shoot(screenshot_dir / "panel-phone.png", width=390, mobile=True, max_height=1200))
    page.go(f"/panel/loops/{standup.loop_id}/")
    assert page.find("#loop-name").text == "Stand-up summary"
    assert [cell.text for cell in page.all("#events .event-kind")] == ["Run now", "Edited", "Created"]
    shots.append(page.shoot(screenshot_dir / "detail.png", width=1100))
    page.go("/panel/new?session=ses_a")
    page.choose("target", "new")
    page.choose("kind", "cron")
    shots.append(page.shoot(screenshot_dir / "create.png", width=1000))
    page.go(f"/panel/loops/{standup.loop_id}/edit")
    page.type("name", "Stand-up summary (weekdays)")
    shots.append(page.shoot(screenshot_dir / "edit.png", width=1000))
    page.go(f"/panel/loops/{standup.loop_id}/run?next=/panel/")
    shots.append(page.shoot(screenshot_dir / "run-now.png", width=800))
    page.go("/panel/sessions/ses_global/status")
    assert "1 loop" in page.text
    shots.append(page.shoot(screenshot_dir / "status.png", width=440))
    for shot in shots:
        data = shot.read_bytes()
        assert data.startswith(b"\x89PNG") and 5_000 < len(data) < 600_000, (shot, len(data))
