"""The Loops panel inside DSH Web (contract §15), in Debian's headless Chromium.

A real DSH with the plugin, the stub model and a real dshloop (API + runloops, DSHLOOP_HOST=dsh):
the sidebar's "Loops" action opens the global panel over DSH with every loop, agent-made and
panel-made; a loop made there for a session picked by title is paused, resumed, run now and
deleted, each seen through dshloop's API and its trail with the actor "dsh-plugin via DSH Web"; a
failing loop shows its error and Retry runs it again; a conversation's Loops tab (which its composer
status opens) shows that session's loops only, and the runs delivered into it; no request, answer or page carries the plugin's
token; a fault forced into the panel's code shows in the panel and leaves DSH Web's chat usable.
DSHLOOP_SCREENSHOTS=1 writes docs/screenshots/dsh-panel-*.png.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from loops.events import Actor
from loops.models import AWAITING_APPROVAL, ActorKind, Loop, LoopRun, RunStatus
from loops.services.lifecycle import loop_resume
from tests.conftest import create_loop, every
from tests.processes import wait_for

from .conftest import TOKEN, agent_calls
from .test_cards_browser import narrow, open_dsh_web

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

ACTOR = {"kind": "token", "id": "dsh-plugin via DSH Web"}

# Everything the page sends and receives over fetch and WebSocket, kept for the token check.
RECORD_TRAFFIC = """
window.__dshloopSeen = [];
const seen = (kind, data) => { try { window.__dshloopSeen.push(kind + ' ' + String(data)); } catch (e) {} };
const fetched = window.fetch;
window.fetch = async function (input, init) {
  seen('request', (typeof input === 'string' ? input : input.url) + ' ' + JSON.stringify(init && init.headers || {})
    + ' ' + (init && typeof init.body === 'string' ? init.body : ''));
  const response = await fetched.apply(this, arguments);
  response.clone().text().then(text => seen('response', text), () => {});
  return response;
};
const Socket = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const socket = protocols === undefined ? new Socket(url) : new Socket(url, protocols);
  seen('socket', url);
  const send = socket.send.bind(socket);
  socket.send = data => { seen('sent', data); return send(data); };
  socket.addEventListener('message', event => seen('received', event.data));
  return socket;
};
window.WebSocket.prototype = Socket.prototype;
Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
"""


def api(dshloop, path: str) -> tuple[int, dict]:
    """dshloop's API as an operator sees it (the plugin's token, which this module's DSH holds)."""
    request = urllib.request.Request(dshloop.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def trail(dshloop, loop_id: str) -> list[tuple[str, dict]]:
    return [(event["kind"], event["actor"]) for event in api(dshloop, f"/api/loops/{loop_id}/events")[1]["events"]]


def row(driver, scope: str, loop_id: str):
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f'[data-dshloop-panel="{scope}"] [data-dshloop-loop="{loop_id}"]')
    return found[0] if found else None


def row_text(driver, scope: str, loop_id: str) -> str:
    return driver.execute_script(
        "const row = document.querySelector(arguments[0]); return row ? row.innerText : ''",
        f'[data-dshloop-panel="{scope}"] [data-dshloop-loop="{loop_id}"]',
    )


def press(driver, scope: str, loop_id: str, action: str) -> None:
    from selenium.webdriver.common.by import By

    wait_for(lambda: row(driver, scope, loop_id), timeout=15, message=f"{loop_id}'s row").find_element(
        By.CSS_SELECTOR, f'[data-dshloop-action="{action}"]'
    ).click()


def rows_in(driver, scope: str) -> list[str]:
    """The loop IDs of the rows a panel draws, top to bottom."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(row => row.dataset.dshloopLoop)",
        f'[data-dshloop-panel="{scope}"] [data-dshloop-loop]',
    )


def selected_view(driver) -> str:
    """The conversation's view on screen (Chat, Trajectory, Loops): DSH Web's selected tab."""
    return driver.execute_script(
        "const tab = document.querySelector('[role=\"tab\"][aria-selected=\"true\"]'); return tab ? tab.innerText.trim() : ''"
    )


def wider_than_the_page(driver, selector: str) -> list[str]:
    """dshloop's elements under `selector` that reach past either edge of the viewport."""
    return driver.execute_script(
        """
        const width = document.documentElement.clientWidth;
        return [...document.querySelectorAll(arguments[0])].filter(element => {
          const box = element.getBoundingClientRect();
          return box.width > 0 && (box.left < -0.5 || box.right > width + 0.5);
        }).map(element => {
          const box = element.getBoundingClientRect();
          return `${element.tagName.toLowerCase()}[name=${element.getAttribute('name')}] ${box.left}..${box.right} of ${width}`;
        });
        """,
        selector,
    )


def retype(field, text: str) -> None:
    """Replace a field's text with key presses, as a person does: Selenium's clear() sets the value
    behind React's back, so the next render puts the old text back and the typing lands after it."""
    from selenium.webdriver.common.keys import Keys

    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.BACKSPACE)
    field.send_keys(text)


def runs_of(loop_id: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id).order_by("scheduled_at"))


@pytest.fixture(scope="module")
def panel_workspace(tmp_path_factory):
    """One workspace for the module's sessions: DSH Web unfolds only one workspace's sessions."""
    return tmp_path_factory.mktemp("panel-work")


@pytest.fixture
def sessions(plugin_dsh, dshloop, panel_workspace, settings):
    """Two titled DSH sessions in a workspace DSH Web lists: {"Alpha": (ID, title), "Beta": …}. The DSH
    serves the whole module, so each test's titles are its own (DSH Web lists the earlier ones too)."""
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", plugin_dsh.url
    workspace_id = plugin_dsh.call("workspace.create", {"path": str(panel_workspace)})["workspace"]["workspaceId"]
    tag = uuid.uuid4().hex[:6]
    made = {}
    for name in ("Alpha", "Beta"):
        session_id, title = f"ses-panel-{name.lower()}-{tag}", f"{name} work {tag}"
        plugin_dsh.call("session.create", {"sessionId": session_id, "workspaceId": workspace_id})
        plugin_dsh.call("session.rename", {"sessionId": session_id, "title": title})
        # DSH Web lists a session once it has a message.
        hello = {"sessionId": session_id, "mode": "queue", "content": [{"type": "text", "text": "hello"}]}
        plugin_dsh.call("session.prompt", hello, rpc_id=f"hello-{session_id}")
        made[name] = (session_id, title)
    for session_id, _ in made.values():
        wait_for(lambda: plugin_dsh.user_messages(session_id), timeout=15, message=f"{session_id}'s first message")
    return made


def test_the_global_panel_lists_creates_and_operates_loops_as_dsh_web(
    plugin_dsh, dshloop, sessions, driver, screenshots, settings
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    (alpha, alpha_title), (beta, beta_title) = sessions["Alpha"], sessions["Beta"]
    agents = agent_calls(
        plugin_dsh, alpha, "loop_create", {"prompt": "Agent made check", "schedule": every(600)}
    ).json()
    settings.DSHLOOP_APPROVE_AGENT_NEW_LOOPS = True  # an agent's `new` loop waits for a person
    waiting = create_loop(every(3600), target="new", created_by=alpha, prompt="Unattended sweep")
    assert waiting.pause_reason == AWAITING_APPROVAL

    added = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_TRAFFIC})
    try:
        driver.set_window_size(1440, 900)
        open_dsh_web(driver, plugin_dsh, alpha_title)
        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, '[data-dshloop-open="panel"]'), timeout=15)[0].click()
        wait_for(lambda: row(driver, "global", agents["loop_id"]), timeout=15, message="the agent's loop in the panel")
        assert "every 10 minutes" in row_text(driver, "global", agents["loop_id"])
        assert f"{alpha_title} ({alpha})" in row_text(driver, "global", agents["loop_id"])
        # An agent's `new` loop awaiting approval is not approved here: any local process can call
        # DSH Web's channel, so the row says where a person approves it, and it still waits.
        assert "awaiting approval" in row_text(driver, "global", waiting.loop_id)
        press(driver, "global", waiting.loop_id, "approve")
        wait_for(
            lambda: "dshloop's own panel" in row_text(driver, "global", waiting.loop_id),
            timeout=10,
            message="the refusal in the row",
        )
        assert Loop.objects.get(loop_id=waiting.loop_id).pause_reason == AWAITING_APPROVAL
        loop_resume(loop_id=waiting.loop_id, actor=Actor(ActorKind.USER, "admin"))  # dshloop's panel does it
        wait_for(lambda: api(dshloop, f"/api/loops/{waiting.loop_id}")[1]["state"] == "scheduled", timeout=10)
        # The filters narrow the list (here: text in the prompt), and widen it again.
        text = driver.find_element(By.CSS_SELECTOR, '[data-dshloop-panel="global"] [name="dshloop-filter-q"]')
        text.send_keys("agent MADE")
        wait_for(lambda: row(driver, "global", waiting.loop_id) is None, timeout=10, message="the filter applied")
        assert row(driver, "global", agents["loop_id"]) is not None
        text.send_keys(Keys.BACKSPACE * len("agent MADE"))
        wait_for(lambda: row(driver, "global", waiting.loop_id), timeout=10, message="the filter cleared")

        # A new loop for a session picked by title; dshloop's refusal shows on its field first.
        panel = driver.find_element(By.CSS_SELECTOR, '[data-dshloop-panel="global"]')
        panel.find_element(By.CSS_SELECTOR, '[data-dshloop-action="new"]').click()
        form = wait_for(lambda: panel.find_elements(By.CSS_SELECTOR, '[data-dshloop-form="create"]'), timeout=5)[0]
        form.find_element(By.NAME, "prompt").send_keys("Panel made report")
        seconds = form.find_element(By.NAME, "seconds")
        retype(seconds, "0")
        Select(form.find_element(By.NAME, "target")).select_by_value("session")
        picker = wait_for(lambda: form.find_elements(By.NAME, "session"), timeout=5)[0]
        wait_for(lambda: f"{beta_title} ({beta})" in picker.text, timeout=10, message="B in the session picker")
        Select(picker).select_by_visible_text(f"{beta_title} ({beta})")
        form.find_element(By.CSS_SELECTOR, '[data-dshloop-action="save"]').click()
        refusal = wait_for(
            lambda: form.find_elements(By.CSS_SELECTOR, '[data-dshloop-field-error="seconds"]'),
            timeout=10,
            message="dshloop's refusal on its field",
        )[0]
        assert "every_seconds" in refusal.text or "at least" in refusal.text, refusal.text
        retype(seconds, "900")
        form.find_element(By.CSS_SELECTOR, '[data-dshloop-action="save"]').click()
        made = wait_for(lambda: Loop.objects.filter(prompt="Panel made report").first(), timeout=10, message="the loop")
        loop_id = made.loop_id
        status, detail = api(dshloop, f"/api/loops/{loop_id}")
        assert status == 200 and detail["session_id"] == beta and detail["schedule"] == every(900)
        assert trail(dshloop, loop_id) == [("created", ACTOR)]
        wait_for(lambda: row(driver, "global", loop_id), timeout=10, message="the panel's loop in the list")
        assert f"{beta_title} ({beta})" in row_text(driver, "global", loop_id)
        driver.save_screenshot(str(screenshots / "dsh-panel-overlay.png"))

        # Edit: a name and a new schedule, one revision.
        press(driver, "global", loop_id, "edit")
        editing = wait_for(lambda: panel.find_elements(By.CSS_SELECTOR, '[data-dshloop-form="edit"]'), timeout=5)[0]
        editing.find_element(By.NAME, "name").send_keys("Beta report")
        retype(editing.find_element(By.NAME, "seconds"), "1200")
        editing.find_element(By.NAME, "max_runs").send_keys("5")  # contract §16: where it ends
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", editing)
        driver.save_screenshot(str(screenshots / "dsh-panel-edit.png"))
        editing.find_element(By.CSS_SELECTOR, '[data-dshloop-action="save"]').click()
        wait_for(lambda: api(dshloop, f"/api/loops/{loop_id}")[1].get("name") == "Beta report", timeout=10)
        edited = api(dshloop, f"/api/loops/{loop_id}")[1]
        assert (edited["schedule"], edited["max_runs"], edited["ends_at"]) == (every(1200), 5, None)
        wait_for(lambda: "Beta report" in row_text(driver, "global", loop_id), timeout=10, message="the new name")
        assert "ends after 5 scheduled runs (0 so far; Run now and Retry do not count)" in row_text(
            driver, "global", loop_id
        )

        press(driver, "global", loop_id, "pause")
        wait_for(lambda: api(dshloop, f"/api/loops/{loop_id}")[1]["state"] == "paused", timeout=10, message="paused")
        wait_for(lambda: "paused" in row_text(driver, "global", loop_id), timeout=10, message="paused in the panel")
        press(driver, "global", loop_id, "resume")
        wait_for(lambda: api(dshloop, f"/api/loops/{loop_id}")[1]["state"] == "scheduled", timeout=10)
        press(driver, "global", loop_id, "run")
        [run] = wait_for(
            lambda: [r for r in runs_of(loop_id) if r.manual and r.status == RunStatus.DELIVERED],
            timeout=30,
            message="the run now delivered",
        )
        assert run.target_session_id == beta and plugin_dsh.loop_messages(beta)
        assert trail(dshloop, loop_id) == [
            ("run_now", ACTOR),
            ("resumed", ACTOR),
            ("paused", ACTOR),
            ("edited", ACTOR),
            ("created", ACTOR),
        ]

        # Its runs, each opening the DSH session it ran in.
        press(driver, "global", loop_id, "runs")
        wait_for(
            lambda: row(driver, "global", loop_id).find_elements(By.CSS_SELECTOR, f'[data-dshloop-run="{run.run_id}"]'),
            timeout=10,
            message="the run in the panel",
        )[0].find_element(By.CSS_SELECTOR, f'[data-dshloop-open-session="{beta}"]').click()
        # The overlay makes way for the session it opened: B's chat, at the run's card.
        wait_for(lambda: not driver.find_elements(By.CSS_SELECTOR, "[data-dshloop-overlay]"), timeout=5)
        wait_for(
            lambda: driver.find_elements(By.CSS_SELECTOR, f'[data-dshloop-status="{beta}"]'),
            timeout=10,
            message="B opened",
        )
        wait_for(
            lambda: driver.find_elements(By.CSS_SELECTOR, f'[data-dshloop-card="{run.run_id}"]'),
            timeout=10,
            message="the run's card in B's chat",
        )
        assert selected_view(driver) != "Loops"
        driver.find_element(By.CSS_SELECTOR, '[data-dshloop-open="panel"]').click()

        press(driver, "global", loop_id, "delete")
        press(driver, "global", loop_id, "delete")  # "Confirm delete"
        wait_for(lambda: api(dshloop, f"/api/loops/{loop_id}")[0] == 404, timeout=10, message="deleted")
        assert trail(dshloop, loop_id)[0] == ("deleted", ACTOR)
        wait_for(lambda: row(driver, "global", loop_id) is None, timeout=10, message="gone from the panel")

        narrow(driver)
        driver.save_screenshot(str(screenshots / "dsh-panel-overlay-phone.png"))
        # On a phone the panel and its New loop form stay inside the screen.
        panel = driver.find_element(By.CSS_SELECTOR, '[data-dshloop-panel="global"]')  # opened anew
        panel.find_element(By.CSS_SELECTOR, '[data-dshloop-action="new"]').click()
        wait_for(lambda: panel.find_elements(By.CSS_SELECTOR, '[data-dshloop-form="create"]'), timeout=5)
        assert wider_than_the_page(driver, "[data-dshloop-overlay], [data-dshloop-overlay] *") == []
        driver.save_screenshot(str(screenshots / "dsh-panel-new-phone.png"))
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)  # Escape closes the overlay
        wait_for(lambda: not driver.find_elements(By.CSS_SELECTOR, "[data-dshloop-overlay]"), timeout=5)
        # The sidebar's Loops entry, in DSH's rail at phone width: a named button of a finger's size.
        action = driver.find_element(By.CSS_SELECTOR, '[data-dshloop-open="panel"]')
        assert action.get_attribute("aria-label") == "Loops"
        assert action.size["width"] >= 32 and action.size["height"] >= 32, action.size
        assert (
            wider_than_the_page(driver, '[data-dshloop-open="panel"], [data-dshloop-status], [data-dshloop-status] *')
            == []
        )
        driver.save_screenshot(str(screenshots / "dsh-sidebar-phone.png"))
        driver.set_window_size(1440, 900)

        seen = "\n".join(driver.execute_script("return window.__dshloopSeen"))
        assert "/dshloop/panel" in seen or '"panel"' in seen, seen[:2000]  # the panel's calls were recorded
        assert TOKEN not in seen and TOKEN not in driver.page_source
        assert TOKEN[:8] not in seen  # not even the token's prefix
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]})


def test_a_failing_loop_retries_and_each_tab_shows_its_own_sessions_loops(
    plugin_dsh, dshloop, sessions, driver, screenshots
):
    from selenium.webdriver.common.by import By

    (alpha, alpha_title), (beta, _) = sessions["Alpha"], sessions["Beta"]
    mine = create_loop(every(600), target=alpha, created_by=alpha, prompt="Alpha's own check")
    failing = create_loop(every(600), target=alpha, created_by=alpha, prompt="FAILNOW on purpose")
    theirs = create_loop(every(600), target=beta, created_by=beta, prompt="Beta's own check")
    Loop.objects.filter(loop_id=failing.loop_id).update(next_at=timezone.now())
    wait_for(
        lambda: [r for r in runs_of(failing.loop_id) if r.outcome == "failed"], timeout=40, message="a failed turn"
    )

    driver.set_window_size(1440, 900)
    open_dsh_web(driver, plugin_dsh, alpha_title)
    # The composer status opens the conversation's Loops tab: A's loops, none of B's.
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, f'[data-dshloop-status="{alpha}"]'), timeout=15)[0].click()
    wait_for(lambda: row(driver, alpha, mine.loop_id), timeout=15, message="A's loop in A's tab")
    wait_for(lambda: "last error" in row_text(driver, alpha, failing.loop_id), timeout=10, message="its error")
    assert row(driver, alpha, theirs.loop_id) is None
    failed_row = row(driver, alpha, failing.loop_id)
    assert failed_row.get_attribute("data-dshloop-mark") == "failed"
    assert "last error" in row_text(driver, alpha, failing.loop_id), row_text(driver, alpha, failing.loop_id)
    assert "failed" in row_text(driver, alpha, failing.loop_id)
    # The runs delivered into the conversation, with how they went.
    [failed_run] = runs_of(failing.loop_id)
    delivered = f'[data-dshloop-delivered="{alpha}"] [data-dshloop-run="{failed_run.run_id}"]'
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, delivered), timeout=10, message="the run delivered here")
    assert "failed" in driver.find_element(By.CSS_SELECTOR, delivered).text
    driver.save_screenshot(str(screenshots / "dsh-panel-tab.png"))
    # DSH Web's dark theme (it follows the system's by default): the tab takes DSH's colours.
    dark = {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", dark)
    driver.save_screenshot(str(screenshots / "dsh-panel-tab-dark.png"))
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    # A row keeps its place while a loop before it changes its next run (dshloop lists by next
    # run): nothing moves under the pointer until the person asks for the new order.
    before = wait_for(lambda: len(rows_in(driver, alpha)) == 2 and rows_in(driver, alpha), timeout=10)
    top = row(driver, alpha, before[0]).location["y"]
    Loop.objects.filter(loop_id=before[0]).update(next_at=timezone.now() + timedelta(days=2))
    wait_for(
        lambda: (
            "next in 1d"
            in (
                driver.execute_script(
                    "const f = document.querySelector(arguments[0]); return f ? f.innerText : ''",
                    f'[data-dshloop-panel="{alpha}"] [data-dshloop-loop="{before[0]}"] [data-dshloop-field="next"]',
                )
                or ""
            )
        ),
        timeout=10,
        message="the new next run in its row",
    )
    assert rows_in(driver, alpha) == before
    assert row(driver, alpha, before[0]).location["y"] == top  # not by a pixel
    driver.find_element(By.CSS_SELECTOR, f'[data-dshloop-panel="{alpha}"] [data-dshloop-action="sort"]').click()
    wait_for(lambda: rows_in(driver, alpha) == before[::-1], timeout=10, message="dshloop's order, asked for")

    # Retry runs it again, now: a second run, marked as run by a person, recorded with the actor.
    press(driver, alpha, failing.loop_id, "retry")
    wait_for(lambda: len(runs_of(failing.loop_id)) == 2, timeout=20, message="the retry's run")
    retried = runs_of(failing.loop_id)[-1]
    assert retried.manual
    wait_for(
        lambda: driver.find_elements(
            By.CSS_SELECTOR, f'[data-dshloop-delivered="{alpha}"] [data-dshloop-run="{retried.run_id}"]'
        ),
        timeout=10,
        message="the retry's run delivered here",
    )
    assert trail(dshloop, failing.loop_id)[0] == ("run_now", ACTOR)

    # The row's last run says what the retry's run says (turn running, then failed), never "failed"
    # while its run says otherwise, nor nothing while it has an outcome.
    def last_run_agrees() -> bool:
        words, last = driver.execute_script(
            "const q = s => (document.querySelector(s) || {}).innerText || '';"
            "return [q(arguments[0]), q(arguments[1])]",
            f'[data-dshloop-delivered="{alpha}"] [data-dshloop-run="{retried.run_id}"] > span:last-child',
            f'[data-dshloop-panel="{alpha}"] [data-dshloop-loop="{failing.loop_id}"] [data-dshloop-field="last-run"]',
        )
        return bool(words) and words.split(":")[0] in last

    wait_for(last_run_agrees, timeout=10, message="the row's last run in its run's words")
    # A run delivered here shows in the chat: the Chat view, at its card.
    driver.find_element(
        By.CSS_SELECTOR, f'[data-dshloop-delivered="{alpha}"] [data-dshloop-run="{retried.run_id}"]'
    ).click()
    wait_for(lambda: selected_view(driver) not in ("", "Loops"), timeout=5, message="the chat")
    wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, f'[data-dshloop-card="{retried.run_id}"]'),
        timeout=10,
        message="the run's card",
    )
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, f'[data-dshloop-status="{alpha}"]'), timeout=5)[0].click()
    wait_for(lambda: row(driver, alpha, failing.loop_id), timeout=10, message="back in the tab")

    narrow(driver)
    driver.save_screenshot(str(screenshots / "dsh-panel-tab-phone.png"))
    driver.set_window_size(1440, 900)


def test_a_fault_in_the_panel_shows_in_the_panel_and_leaves_dsh_web_usable(plugin_dsh, dshloop, sessions, driver):
    from selenium.webdriver.common.by import By

    alpha_title = sessions["Alpha"][1]
    driver.set_window_size(1440, 900)
    open_dsh_web(driver, plugin_dsh, alpha_title)
    driver.execute_script("window.DSHLOOP_FAULT = 'panel'")
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, '[data-dshloop-open="panel"]'), timeout=15)[0].click()
    failure = wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, '[data-dshloop-panel="global"][data-dshloop-error="panel"]'),
        timeout=10,
        message="the panel's own error",
    )[0]
    assert "The Loops panel failed" in failure.text
    # Closed by its backdrop; DSH's chat takes input as before.
    driver.execute_script("document.querySelector('[data-dshloop-overlay]').click()")
    wait_for(lambda: not driver.find_elements(By.CSS_SELECTOR, "[data-dshloop-overlay]"), timeout=5)
    composer = driver.find_element(By.CSS_SELECTOR, "textarea, [contenteditable='true']")
    composer.send_keys("still usable")
    assert "still usable" in (composer.get_attribute("value") or composer.text)
    assert "Failed to load plugins" not in driver.execute_script("return document.body.innerText")
