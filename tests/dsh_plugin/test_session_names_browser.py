"""The sessions dshloop makes in DSH, as a person meets them in DSH Web (headless Chromium).

A fresh DSH with the plugin (this module's own DSH_HOME, nothing in it), the stub model:
- after `manage.py bootstrap` made the global interface session, the first message a person types
  in DSH Web, and the one after "New Session", land in sessions of their own, never in the global
  one (DSH Web opens a session in which no turn has run as its new chat: `blank` in session.list);
- a `new` loop's run session is titled for its loop and occurrence, read back from DSH;
- once its turn has ended, it is archived (out of DSH Web's list, its log kept) only when the
  operator sets DSHLOOP_ARCHIVE_FRESH_RUNS.
DSHLOOP_SCREENSHOTS=1 writes the pictures to docs/screenshots/ (dsh-session-names*.png).
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from loops.models import LoopRun
from scheduler.message import fresh_session_title
from sessions_app.hosts.dsh import GLOBAL_SESSION_TITLE
from tests.conftest import after, create_loop
from tests.processes import wait_for

from .conftest import start_dshloop

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

COMPOSER = "textarea, [contenteditable='true']"


def title_of(item: dict) -> str | None:
    return item.get("projections", {}).get("values", {}).get("title")


def sessions_holding(dsh, text: str) -> list[str]:
    """The sessions in which a person's message (source `user`) carries `text`."""
    return [
        session_id
        for session_id in dsh.sessions()
        if any(
            text in "".join(part.get("text", "") for part in event["data"]["content"])
            for event in dsh.user_messages(session_id)
        )
    ]


def type_message(driver, text: str) -> None:
    from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def typed() -> bool:
        # DSH Web draws the composer again when it opens a session (one found before that is gone),
        # and it is covered for a moment while a view slides in.
        try:
            fields = [field for field in driver.find_elements(By.CSS_SELECTOR, COMPOSER) if field.is_displayed()]
            if not fields:
                return False
            fields[0].click()
            fields[0].send_keys(text + Keys.ENTER)
            return True
        except (StaleElementReferenceException, ElementClickInterceptedException):
            return False

    wait_for(typed, timeout=30, message="DSH Web's composer to take a message")


def open_dsh_web(driver, dsh) -> None:
    from selenium.webdriver.common.by import By

    driver.get(dsh.url + "/")
    # DSH's first-visit notice, on a browser's first visit only; then the composer.
    wait_for(
        lambda: (
            driver.find_elements(By.XPATH, "//button[normalize-space()='Continue']")
            or driver.find_elements(By.CSS_SELECTOR, COMPOSER)
        ),
        timeout=15,
        message="DSH Web",
    )
    for button in driver.find_elements(By.XPATH, "//button[normalize-space()='Continue']"):
        button.click()


def test_a_persons_first_chat_and_new_session_never_land_in_the_global_interface(
    plugin_dsh, dshloop, workspace, settings, driver, screenshots
):
    from selenium.webdriver.common.by import By

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # bootstrap makes an admin
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", plugin_dsh.url
    settings.DSHLOOP_DSH_CWD, settings.DSHLOOP_GLOBAL_SESSION_ID = str(workspace), settings.DSH_GLOBAL_SESSION_ID
    global_id = settings.DSH_GLOBAL_SESSION_ID
    call_command("bootstrap", stdout=StringIO())  # as `make run-dsh` runs it, DSH answering

    # What DSH Web goes by: a session in which no turn has run is `blank`, and its New Session
    # (also the chat it opens on a first visit) reuses the workspace's blank session.
    made = plugin_dsh.sessions()[global_id]
    assert made["blank"] is False and not made["running"]
    assert title_of(made) == GLOBAL_SESSION_TITLE

    open_dsh_web(driver, plugin_dsh)
    type_message(driver, "first words from a person")
    [first] = wait_for(lambda: sessions_holding(plugin_dsh, "first words"), timeout=20, message="the first chat")
    assert first != global_id

    # "New Session" (the sidebar's button) opens another blank session: again not the global one.
    wait_for(lambda: plugin_dsh.sessions()[first]["blank"] is False, timeout=20, message="the first chat's turn")
    wait_for(
        lambda: [
            b for b in driver.find_elements(By.XPATH, "//button[normalize-space()='New Session']") if b.is_displayed()
        ],
        timeout=15,
        message="the New Session button",
    )[0].click()
    type_message(driver, "second chat from a person")
    [second] = wait_for(lambda: sessions_holding(plugin_dsh, "second chat"), timeout=20, message="the second chat")
    assert second not in (global_id, first)
    # The global session holds only its own introduction; the sidebar shows it by its title.
    assert len(plugin_dsh.user_messages(global_id)) == 1
    wait_for(
        lambda: driver.find_elements(By.XPATH, f"//span[normalize-space()='{GLOBAL_SESSION_TITLE}']"),
        timeout=15,
        message="the global session in the sidebar",
    )
    driver.set_window_size(1440, 900)
    driver.save_screenshot(str(screenshots / "dsh-session-names-global.png"))
    driver.set_window_size(390, 844)
    driver.save_screenshot(str(screenshots / "dsh-session-names-global-phone.png"))
    driver.set_window_size(1280, 800)


def test_a_new_loops_run_session_is_titled_for_its_loop_and_occurrence(
    plugin_dsh, dshloop, workspace, driver, screenshots
):
    from selenium.webdriver.common.by import By

    loop = create_loop(after(1), target="new", prompt="Nightly triage of the support inbox, then report")
    run = wait_for(
        lambda: LoopRun.objects.filter(loop_id=loop.loop_id, status="delivered").exclude(target_session_id="").first(),
        timeout=60,
        interval=0.5,
        message="the fresh run's delivery",
    )
    expected = fresh_session_title(name="", prompt=loop.prompt, scheduled_at=run.scheduled_at, tz="")
    assert expected.startswith("Nightly triage of the support inbox,") and expected.endswith(" UTC")
    assert title_of(plugin_dsh.sessions()[run.target_session_id]) == expected
    # Its turn's prompt gives it no other title afterwards (a title set by session.rename is pinned).
    wait_for(
        lambda: not plugin_dsh.sessions()[run.target_session_id]["running"], timeout=30, message="the run's turn to end"
    )
    assert title_of(plugin_dsh.sessions()[run.target_session_id]) == expected
    # Its outcome recorded, it stays in DSH Web's list: archiving is the operator's choice.
    wait_for(lambda: LoopRun.objects.get(run_id=run.run_id).outcome, timeout=30, message="the run's outcome")
    assert run.target_session_id not in plugin_dsh.call("workspace.list")["archivedSessionIds"]

    # As on a first visit (the module's earlier test left a session open, its workspace unfolded):
    # DSH Web opens the most recent workspace, this run's.
    driver.get(plugin_dsh.url + "/")
    driver.execute_script("window.localStorage.clear(); window.sessionStorage.clear()")
    open_dsh_web(driver, plugin_dsh)
    wait_for(
        lambda: driver.find_elements(By.XPATH, f"//span[normalize-space()={expected!r}]"),
        timeout=20,
        message="the run's session in DSH Web's sidebar",
    )[0].click()
    # Open, it shows the whole title above its chat (the sidebar's row is cut to its width).
    wait_for(
        lambda: len(driver.find_elements(By.XPATH, f"//*[normalize-space()={expected!r}]")) >= 2,
        timeout=15,
        message="the run's session open",
    )
    driver.set_window_size(1440, 900)
    driver.save_screenshot(str(screenshots / "dsh-session-names-fresh-run.png"))
    driver.set_window_size(390, 844)  # DSH Web keeps its sidebar open at any width: the titles are there
    driver.save_screenshot(str(screenshots / "dsh-session-names-fresh-run-phone.png"))
    driver.set_window_size(1280, 800)


def test_with_archiving_on_a_finished_runs_session_leaves_dsh_webs_list_and_the_run_still_names_it(
    plugin_dsh, transactional_db, tmp_path, dshloop_port, workspace
):
    server = start_dshloop(tmp_path, dshloop_port, plugin_dsh, workspace, DSHLOOP_ARCHIVE_FRESH_RUNS="1")
    try:
        loop = create_loop(after(1), target="new", prompt="Weekly dependency audit")
        run = wait_for(
            lambda: LoopRun.objects.filter(loop_id=loop.loop_id).exclude(outcome="").first(),
            timeout=60,
            interval=0.5,
            message="the fresh run's outcome",
        )
        assert run.outcome == "succeeded", (run.outcome, run.error)
        wait_for(
            lambda: run.target_session_id in plugin_dsh.call("workspace.list")["archivedSessionIds"],
            timeout=15,
            message="the run's session archived",
        )
        # The run still names it, and DSH keeps its log: the delivered message and the answer.
        assert LoopRun.objects.get(run_id=run.run_id).target_session_id == run.target_session_id
        assert plugin_dsh.loop_messages(run.target_session_id, run.occurrence_key)
        assert title_of(plugin_dsh.sessions()[run.target_session_id]).startswith("Weekly dependency audit · ")
    finally:
        server.stop()
