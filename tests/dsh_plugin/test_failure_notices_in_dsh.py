"""Failure notices in a real DSH with the plugin (contract §16): a loop whose turns the model refuses
(the stub's FAILNOW) until it pauses itself puts exactly one notice into its creator's session — a
plugin message whose source says `notice: true` under the episode's key — although its scheduler
is killed (kill -9) between the failures, and DSH Web draws it as a notice card. A notice delivered
again (a sender that died before recording it) is still one message.
DSHLOOP_SCREENSHOTS=1 writes docs/screenshots/dsh-notice-card*.png.
"""

from __future__ import annotations

import os
import signal

import pytest

from loops.models import FailureEpisode, Loop, LoopRun, LoopState
from scheduler.failure_notices import notice_message
from sessions_app.hosts.base import HostError
from sessions_app.hosts.dsh import DshHost
from tests.conftest import create_loop, every
from tests.processes import wait_for

from .conftest import start_dshloop
from .test_cards_browser import narrow, open_dsh_web

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

AUTO_PAUSE_AFTER = 3


@pytest.fixture
def failing_fast(transactional_db, tmp_path, plugin_dsh, dshloop_port, workspace):
    """`serve` on DSH whose loops pause after three failures, a second apart, outcomes and notices
    looked for every second."""
    server = start_dshloop(
        tmp_path,
        dshloop_port,
        plugin_dsh,
        workspace,
        DSHLOOP_AUTO_PAUSE_AFTER=str(AUTO_PAUSE_AFTER),
        DSHLOOP_FAILURE_BACKOFF_SECONDS="1",
        DSHLOOP_OUTCOME_POLL_SECONDS="1",
        DSHLOOP_FAILURE_NOTICE_POLL_SECONDS="1",
    )
    yield server
    server.stop()


def notices(plugin_dsh, session_id: str) -> list[dict]:
    return [m for m in plugin_dsh.loop_messages(session_id) if m["data"]["source"].get("notice") is True]


def test_a_loop_that_pauses_itself_puts_one_notice_card_into_its_creators_session(
    plugin_dsh, failing_fast, workspace, settings, driver, screenshots
):
    from selenium.webdriver.common.by import By

    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", plugin_dsh.url
    workspace_id = plugin_dsh.call("workspace.create", {"path": str(workspace)})["workspace"]["workspaceId"]
    for session_id, title in (("ses-creator", "Notice work"), ("ses-failing", "Failing work")):
        plugin_dsh.call("session.create", {"sessionId": session_id, "workspaceId": workspace_id})
        plugin_dsh.call("session.rename", {"sessionId": session_id, "title": title})
    loop = create_loop(every(2), target="ses-failing", created_by="ses-creator", prompt="FAILNOW: refuse this turn")
    Loop.objects.filter(loop_id=loop.loop_id).update(name="nightly-check")

    wait_for(
        lambda: LoopRun.objects.filter(loop_id=loop.loop_id, outcome="failed").exists(),
        timeout=40,
        message="the first refused turn",
    )
    killed = failing_fast.server.ready_scheduler()
    os.kill(killed, signal.SIGKILL)  # serve starts another one
    failing_fast.server.ready_scheduler(other_than=killed)

    episode = wait_for(
        lambda: FailureEpisode.objects.filter(loop_id=loop.loop_id, notice_status="delivered").first(),
        timeout=60,
        interval=0.2,
        message="the notice delivered",
    )
    assert Loop.objects.get(loop_id=loop.loop_id).state == LoopState.PAUSED
    assert (episode.event, episode.consecutive_failures) == ("loop_auto_paused", AUTO_PAUSE_AFTER)
    [notice] = notices(plugin_dsh, "ses-creator")
    source = notice["data"]["source"]
    assert source == {
        "kind": "plugin",
        "plugin": "dshloop",
        "form": "notice",
        "summary": "Loop failed: nightly-check",
        "deliveryKey": episode.key,
        "loop": {"loop_id": loop.loop_id, "run_id": episode.run_id},
        "notice": True,
    }
    text = notice["data"]["content"][0]["text"]
    assert f"paused itself after {AUTO_PAUSE_AFTER} failures in a row" in text and "stub refuses" in text
    assert not notices(plugin_dsh, "ses-failing")
    assert FailureEpisode.objects.count() == 1

    # DSH Web draws it as a notice card.
    driver.set_window_size(1440, 900)
    open_dsh_web(driver, plugin_dsh, "Notice work")
    card = wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, f'[data-dshloop-notice="{loop.loop_id}"]'),
        timeout=20,
        message="the notice card",
    )[0]
    assert card.get_attribute("data-dshloop-card") == episode.run_id
    wait_for(lambda: "paused" in card.text, timeout=20, message="the card's loop mark")
    assert "Notice: nightly-check" in card.text, card.text
    driver.execute_script("arguments[0].scrollIntoView()", card)
    driver.save_screenshot(str(screenshots / "dsh-notice-card.png"))
    narrow(driver)
    wait_for(  # the sidebar folded away: no CSS transition still running
        lambda: driver.execute_script(
            "return !document.getAnimations().some(a => a instanceof CSSTransition && a.playState === 'running')"
        ),
        timeout=5,
        message="DSH Web's sidebar to fold",
    )
    driver.execute_script(f"document.querySelector('[data-dshloop-notice=\"{loop.loop_id}\"]').scrollIntoView()")
    driver.save_screenshot(str(screenshots / "dsh-notice-card-phone.png"))
    driver.set_window_size(1440, 900)

    # A sender that died after DSH took the notice, before recording it, delivers it again: one message.
    host = DshHost(plugin_dsh.url, cwd=str(workspace))
    [again] = host.deliver_many([notice_message(episode, "ses-creator")])
    assert not isinstance(again, HostError)
    assert len(notices(plugin_dsh, "ses-creator")) == 1
