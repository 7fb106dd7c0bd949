"""The composer status in DSH Web (spec §8.1, contract §13), in Debian's headless Chromium.

A real DSH with the plugin, a real dshloop: session A's agent makes a loop through the tool; A's
composer shows `1 loop` and a ticking countdown, B's shows `no loops`, and once A's agent deletes the
loop A's composer says `no loops` without a reload. DSHLOOP_SCREENSHOTS=1 writes the pictures to
docs/screenshots/ (dsh-composer-*.png).
"""

from __future__ import annotations

import re
import time

import pytest

from tests.processes import wait_for

from .conftest import agent_calls

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

COUNTDOWN = re.compile(r"^1 loop · next in (\d+m \d\ds)$")


def status_of(driver, session_id: str) -> str:
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f'[data-dshloop-status="{session_id}"]')
    return found[0].text if found else ""


def open_session(driver, title: str) -> None:
    from selenium.webdriver.common.by import By

    wait_for(lambda: driver.find_elements(By.XPATH, f"//span[normalize-space()='{title}']"), timeout=15, message=title)[
        0
    ].click()


def test_each_composer_shows_its_own_loops_and_follows_a_delete(plugin_dsh, dshloop, workspace, driver, screenshots):
    from selenium.webdriver.common.by import By

    # DSH Web lists a workspace's sessions once they have a message.
    workspace_id = plugin_dsh.call("workspace.create", {"path": str(workspace)})["workspace"]["workspaceId"]
    for session, title in (("ses-a", "Alpha work"), ("ses-b", "Beta work")):
        plugin_dsh.call("session.create", {"sessionId": session, "workspaceId": workspace_id})
        plugin_dsh.call("session.rename", {"sessionId": session, "title": title})
    loop = agent_calls(
        plugin_dsh,
        "ses-a",
        "loop_create",
        {"prompt": "Check the deploy", "schedule": {"kind": "every", "every_seconds": 600}},
    ).json()
    assert agent_calls(plugin_dsh, "ses-b", "loop_list", {}).json() == {"loops": []}

    driver.get(plugin_dsh.url + "/")
    for button in wait_for(  # DSH's first-visit notice
        lambda: driver.find_elements(By.XPATH, "//button[normalize-space()='Continue']"), timeout=15, message="DSH Web"
    ):
        button.click()
    driver.execute_script("window.__dshloopNoReload = true")

    open_session(driver, "Alpha work")
    first = wait_for(lambda: COUNTDOWN.match(status_of(driver, "ses-a")), timeout=15, message="A's status")
    link = driver.find_element(By.CSS_SELECTOR, '[data-dshloop-status="ses-a"]').get_attribute("href")
    assert link == f"{dshloop.url}/panel/?session=ses-a"
    # The countdown ticks on its own.
    wait_for(
        lambda: (m := COUNTDOWN.match(status_of(driver, "ses-a"))) and m[1] != first[1], timeout=5, message="a tick"
    )
    driver.save_screenshot(str(screenshots / "dsh-composer-one-loop.png"))

    open_session(driver, "Beta work")
    wait_for(lambda: status_of(driver, "ses-b") == "no loops", timeout=15, message="B's status")
    assert status_of(driver, "ses-a") == ""  # only the open conversation's composer
    driver.save_screenshot(str(screenshots / "dsh-composer-no-loops.png"))

    open_session(driver, "Alpha work")
    wait_for(lambda: COUNTDOWN.match(status_of(driver, "ses-a")), timeout=15, message="A's status again")
    agent_calls(plugin_dsh, "ses-a", "loop_delete", {"loop_id": loop["loop_id"]}).json()
    started = time.monotonic()
    wait_for(lambda: status_of(driver, "ses-a") == "no loops", timeout=15, message="A's status after the delete")
    assert time.monotonic() - started < 10  # within a few seconds (it asks every 3 s)
    assert driver.execute_script("return window.__dshloopNoReload") is True  # the same page, not reloaded
