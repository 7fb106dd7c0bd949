"""Loop cards in DSH Web's chat (contract §15), in Debian's headless Chromium.

A real DSH with the plugin and a real dshloop delivering into it: each delivery is drawn as a card
with the loop's name, its schedule in words, "delivered by dshloop" and the run's outcome, the XML
only on demand; a failing turn marks its card; and a fault forced into the plugin's web half
leaves DSH Web's chat usable. DSHLOOP_SCREENSHOTS=1 writes docs/screenshots/dsh-card-*.png.
"""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from loops.models import Loop, LoopRun, RunStatus
from tests.conftest import after, create_loop, every
from tests.processes import wait_for

from .test_composer_browser import open_session

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]


def cards(driver) -> dict[str, str]:
    """Each card's text by run ID, read in one script: the cards re-render as their data refreshes."""
    return driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('[data-dshloop-card]')]"
        ".map(card => [card.dataset.dshloopCard, card.innerText]))"
    )


def finished(loop_id: str, outcome: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id, status=RunStatus.DELIVERED, outcome=outcome))


def titled(session_id: str) -> str:
    """A conversation's title, its own among the module's (they share one workspace)."""
    return f"Card work {session_id[-4:]}"


@pytest.fixture(scope="module")
def cards_workspace(tmp_path_factory):
    """One workspace for the module's conversations: DSH Web unfolds only one workspace's sessions
    (the one it last showed), so a second test's session in a workspace of its own stays hidden."""
    return tmp_path_factory.mktemp("cards-work")


@pytest.fixture
def conversation(plugin_dsh, dshloop, cards_workspace, settings):
    """A titled DSH session in a workspace DSH Web lists, which loops are delivered into."""
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", plugin_dsh.url
    workspace_id = plugin_dsh.call("workspace.create", {"path": str(cards_workspace)})["workspace"]["workspaceId"]
    session_id = f"ses-cards-{uuid.uuid4().hex[:8]}"  # the DSH serves the whole module
    plugin_dsh.call("session.create", {"sessionId": session_id, "workspaceId": workspace_id})
    plugin_dsh.call("session.rename", {"sessionId": session_id, "title": titled(session_id)})
    return session_id


def open_dsh_web(driver, plugin_dsh, title: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(plugin_dsh.url + "/")
    # DSH's first-visit notice (once per browser profile), else the session list.
    notice = "//button[normalize-space()='Continue']"
    wait_for(
        lambda: driver.find_elements(By.XPATH, f"{notice} | //span[normalize-space()='{title}']"),
        timeout=15,
        message="DSH Web",
    )
    for button in driver.find_elements(By.XPATH, notice):
        button.click()
    # DSH Web remembers a sidebar folded at phone width (narrow): unfold it to reach the sessions.
    driver.execute_script(
        "const toggle = document.querySelector('button[aria-label=\"Open sidebar\"]'); if (toggle) toggle.click()"
    )
    open_session(driver, title)


def narrow(driver) -> None:
    """Phone width, with DSH Web's sidebar folded to its rail as a person on a phone would: DSH Web
    keeps it open at any width. Its toggle is named for what it does, so a sidebar already folded
    (DSH Web remembers it across pages) stays folded."""
    driver.execute_script(
        "const toggle = document.querySelector('button[aria-label=\"Collapse sidebar\"]'); if (toggle) toggle.click()"
    )
    driver.set_window_size(390, 844)
    # The fold is animated: the picture is taken once it has settled.
    wait_for(
        lambda: driver.execute_script(
            "return !!document.querySelector('button[aria-label=\"Open sidebar\"]')"
            " && !!document.querySelector('.dshloop-sidebar-action--rail')"
            " && document.getAnimations().every(a => !(a instanceof CSSTransition) || a.playState !== 'running')"
        ),
        timeout=5,
        message="the sidebar folded",
    )


def test_deliveries_are_loop_cards_with_their_outcome_and_a_failed_turn_is_marked(
    plugin_dsh, conversation, driver, screenshots
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    loop = create_loop(after(1), target=conversation, created_by=conversation, prompt="Check the build and report")
    Loop.objects.filter(loop_id=loop.loop_id).update(name="build-check")
    [run] = wait_for(lambda: finished(loop.loop_id, "succeeded"), timeout=40, message="a delivered run's outcome")
    failing = create_loop(after(1), target=conversation, created_by=conversation, prompt="FAILNOW please")
    [bad] = wait_for(lambda: finished(failing.loop_id, "failed"), timeout=40, message="a failed turn's outcome")

    driver.set_window_size(1440, 900)
    open_dsh_web(driver, plugin_dsh, titled(conversation))
    # The first page of a fresh Chromium and DSH Web (the module's first) is slow on a busy machine.
    text = wait_for(
        lambda: "succeeded" in cards(driver).get(run.run_id, "") and cards(driver)[run.run_id],
        timeout=45,
        message="the run's card with its outcome",
    )
    assert "build-check" in text and "in 1 second" not in text and "delivered by dshloop" in text, text
    # The failing turn's card says so, and is marked.
    wait_for(
        lambda: driver.find_elements(
            By.CSS_SELECTOR, f'[data-dshloop-card="{bad.run_id}"][data-dshloop-mark="failed"]'
        ),
        timeout=20,
        message="the failed run's card, marked",
    )
    assert "failed" in cards(driver)[bad.run_id] and "FAILNOW please" in cards(driver)[bad.run_id]
    driver.execute_script(f"document.querySelector('[data-dshloop-card=\"{run.run_id}\"]').scrollIntoView()")
    driver.save_screenshot(str(screenshots / "dsh-card.png"))
    # "Open loop" opens DSH Web's Loops panel on that loop, in place: no second site, no sign-in.
    handles = driver.window_handles
    driver.find_element(
        By.CSS_SELECTOR, f'[data-dshloop-card="{bad.run_id}"] [data-dshloop-action="open-loop"]'
    ).click()
    panel_loop = f'[data-dshloop-panel="global"] [data-dshloop-loop="{failing.loop_id}"]'
    [row] = wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, panel_loop), timeout=15, message="the loop in the panel"
    )
    assert "FAILNOW please" in row.text and driver.window_handles == handles
    driver.save_screenshot(str(screenshots / "dsh-card-open-loop.png"))
    driver.find_element(By.CSS_SELECTOR, "body").send_keys(Keys.ESCAPE)
    wait_for(lambda: not driver.find_elements(By.CSS_SELECTOR, "[data-dshloop-overlay]"), timeout=5, message="closed")
    # A recurring loop whose turns fail: the composer marks the conversation's loops as failed.
    recurring = create_loop(every(600), target=conversation, created_by=conversation, prompt="FAILNOW again")
    Loop.objects.filter(loop_id=recurring.loop_id).update(next_at=timezone.now())
    wait_for(lambda: finished(recurring.loop_id, "failed"), timeout=40, message="the recurring loop's failed turn")
    wait_for(
        lambda: driver.find_elements(
            By.CSS_SELECTOR, f'[data-dshloop-status="{conversation}"][data-dshloop-mark="failed"]'
        ),
        timeout=20,
        message="the composer's failed mark",
    )
    assert "1 failed" in driver.execute_script(
        f"return document.querySelector('[data-dshloop-status=\"{conversation}\"]').innerText"
    )
    # No raw XML in the chat (the stub model's replies echo it: "ack: <loop> …").
    body = driver.execute_script("return document.body.innerText").splitlines()
    assert not [line for line in body if "<loop>" in line and not line.startswith("ack:")], body

    card = driver.find_element(By.CSS_SELECTOR, f'[data-dshloop-card="{run.run_id}"]')
    link = card.find_element(By.LINK_TEXT, "Open loop").get_attribute("href")
    assert link.endswith(f"/panel/loops/{loop.loop_id}/")
    card.find_element(By.XPATH, ".//button[normalize-space()='Show message']").click()
    assert f"<loop_id>{loop.loop_id}</loop_id>" in card.find_element(By.TAG_NAME, "pre").text
    driver.save_screenshot(str(screenshots / "dsh-card-message.png"))
    narrow(driver)
    driver.execute_script(f"document.querySelector('[data-dshloop-card=\"{bad.run_id}\"]').scrollIntoView()")
    driver.save_screenshot(str(screenshots / "dsh-card-phone.png"))
    driver.set_window_size(1440, 900)


def test_a_deleted_loops_card_keeps_its_outcome_and_its_runs_stay_in_dsh_web(plugin_dsh, conversation, driver):
    """spec §4: deleting a loop does not erase its runs. Its card still says how its run went, marked
    "loop deleted"; "Open loop" shows the deleted loop's runs; the conversation's Loops tab still lists
    the run as delivered here, named as the loop was and marked as a deleted loop's."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from loops.events import Actor
    from loops.services import lifecycle

    loop = create_loop(after(1), target=conversation, created_by=conversation, prompt="Check the logs once")
    Loop.objects.filter(loop_id=loop.loop_id).update(name="log-check")
    [run] = wait_for(lambda: finished(loop.loop_id, "succeeded"), timeout=40, message="a delivered run's outcome")
    lifecycle.loop_delete(loop_id=loop.loop_id, actor=Actor.session(conversation))

    driver.set_window_size(1440, 900)
    open_dsh_web(driver, plugin_dsh, titled(conversation))
    text = wait_for(
        lambda: "succeeded" in cards(driver).get(run.run_id, "") and cards(driver)[run.run_id],
        timeout=45,
        message="the deleted loop's card with its run's outcome",
    )
    assert "loop deleted" in text and "log-check" in text, text
    driver.find_element(
        By.CSS_SELECTOR, f'[data-dshloop-card="{run.run_id}"] [data-dshloop-action="open-loop"]'
    ).click()
    deleted = f'[data-dshloop-panel="global"] [data-dshloop-loop-deleted="{loop.loop_id}"]'
    [block] = wait_for(
        lambda: (
            driver.find_elements(By.CSS_SELECTOR, f'{deleted} [data-dshloop-run="{run.run_id}"]')
            and driver.find_elements(By.CSS_SELECTOR, deleted)
        ),
        timeout=15,
        message="the deleted loop's runs in the panel",
    )
    assert "deleted" in block.text and "succeeded" in block.text, block.text
    driver.find_element(By.CSS_SELECTOR, "body").send_keys(Keys.ESCAPE)
    wait_for(lambda: not driver.find_elements(By.CSS_SELECTOR, "[data-dshloop-overlay]"), timeout=5, message="closed")
    # The conversation's Loops tab (its composer status opens it): the run, delivered here.
    driver.find_element(By.CSS_SELECTOR, f'[data-dshloop-status="{conversation}"]').click()
    here = f'[data-dshloop-delivered="{conversation}"] [data-dshloop-run="{run.run_id}"]'
    [row] = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, here), timeout=15, message="the run delivered here")
    assert "log-check" in row.text and "loop deleted" in row.text and "succeeded" in row.text, row.text


@pytest.mark.parametrize("fault", ["apply", "card"])
def test_a_fault_in_the_plugins_web_half_leaves_dsh_web_usable(plugin_dsh, conversation, driver, fault):
    from selenium.webdriver.common.by import By

    loop = create_loop(every(4), target=conversation, created_by=conversation, prompt="Check the build and report")
    wait_for(lambda: finished(loop.loop_id, "succeeded"), timeout=40, message="a delivered run's outcome")
    Loop.objects.filter(loop_id=loop.loop_id).update(state="paused", next_at=None)

    added = driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument", {"source": f"window.DSHLOOP_FAULT = {fault!r}"}
    )
    try:
        open_dsh_web(driver, plugin_dsh, titled(conversation))
        # DSH draws its own rows for what the card would have shown, and the composer takes input.
        wait_for(
            lambda: "Context injection" in driver.execute_script("return document.body.innerText"),
            timeout=20,
            message="DSH's own row for the delivery",
        )
        assert cards(driver) == {}
        composer = driver.find_element(By.CSS_SELECTOR, "textarea, [contenteditable='true']")
        composer.send_keys("still usable")
        assert "Failed to load plugins" not in driver.execute_script("return document.body.innerText")
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]})
