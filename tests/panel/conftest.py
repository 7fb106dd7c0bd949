"""Panel fixtures: staff / non-staff / anonymous clients, a small world of sessions, a loop maker,
and (for tests marked `browser`) a real headless Chromium driven by Selenium."""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest
from django.test import Client

from sessions_app.services import preset_upsert, session_upsert
from tests.conftest import create_loop, every

CHROMIUM = os.environ.get("DSHLOOP_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("DSHLOOP_CHROMEDRIVER", "/usr/bin/chromedriver")
# The flags this machine needs: no sandbox as root, and no background calls to a closed network.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # The default PBKDF2 is slow by design, and every test user made pays for it; the tests need no strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_user("ada", password=PASSWORD, is_staff=True, is_superuser=True)


@pytest.fixture
def staff_client(staff_user) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


@pytest.fixture
def plain_client(django_user_model) -> Client:
    user = django_user_model.objects.create_user("bob", password=PASSWORD)
    client = Client()
    client.force_login(user)
    return client


def session(session_id: str, **changes):
    return session_upsert(session_id=session_id, changes=changes)


@pytest.fixture
def world(db):
    """On the embedded host: the global interface, two titled sessions, one without a title, and a
    mountable preset. (The panel reaches the host only through get_host(), so one host suffices.)"""
    session("ses_global", global_interface=True, user_title="Interface", preset="interface", model="m1")
    session("ses_a", user_title="Release review", status="running", preset="coder")
    session("ses_b", generated_title="Nightly data sync", status="cold", preset="coder")
    session("ses_untitled", status="idle")
    preset_upsert(name="reviewer", mountable=True)
    return {"global": "ses_global", "a": "ses_a", "b": "ses_b", "untitled": "ses_untitled"}


@pytest.fixture
def make_loop(world):
    """Create a loop through the service, as the tools and the panel do."""

    def make(prompt="Check the deployment", *, schedule=None, session_id="ses_a", preset=None, now=None):
        return create_loop(schedule or every(600), prompt=prompt, target=session_id, preset=preset, at=now)

    return make


def admin_url(model: str, pk: str, view: str = "change") -> str:
    """The admin URL of one object: admin quotes primary keys ("loop_25…" would otherwise read as "%")."""
    from django.contrib.admin.utils import quote
    from django.urls import reverse

    return reverse(f"admin:{model}_{view}", args=[quote(pk)])


# --- browser -----------------------------------------------------------------------------------


def chromium_missing_reason() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (Path(path).exists() or shutil.which(path)):
            return f"{path} is missing: apt-get install -y chromium chromium-driver"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[test]'"
    return None


@pytest.fixture(scope="session")
def chromium(live_server):
    """One headless Chromium for the browser tests (Debian's, never a downloaded build); it depends
    on live_server so that it quits (closing its connections) before the server stops."""
    driver = start_chromium(window="1280,900")
    yield driver
    driver.quit()


def start_chromium(*, window: str):
    """Debian's headless Chromium through its chromedriver, at `window` ("width,height"); the test
    is skipped with the reason when it is missing, and fails under CI=true."""
    reason = chromium_missing_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--window-size={window}", "--lang=en-US"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    return driver


@pytest.fixture
def browser(chromium, live_server, monkeypatch):
    """The browser for one test. The live server answers each browser connection on its own thread,
    which would keep a persistent database connection (CONN_MAX_AGE) for as long as Chromium keeps
    the socket alive — and PostgreSQL cannot drop a test database that still has sessions. So the
    server closes its database connection after every request while a browser test runs."""
    from django.db import connections

    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)
    yield chromium
    chromium.get("about:blank")  # nothing left open that could call the server (the status page refreshes)


@pytest.fixture
def screenshot_dir(tmp_path) -> Path:
    """docs/screenshots when DSHLOOP_SCREENSHOTS=1 (to refresh the committed pictures), else a temp dir."""
    if os.environ.get("DSHLOOP_SCREENSHOTS") == "1":
        target = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        return target
    return tmp_path


WAIT = 10


class Page:
    """A thin layer over the driver: navigate, find, wait (pages are server-rendered)."""

    def __init__(self, driver, base_url: str):
        self.driver, self.base = driver, base_url

    def go(self, path: str):
        self.driver.get(self.base + path)

    def wait(self, condition, message: str = ""):
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, WAIT).until(condition, message)

    def find(self, css: str):
        from selenium.webdriver.common.by import By

        return self.wait(lambda d: d.find_element(By.CSS_SELECTOR, css), f"no {css}")

    def all(self, css: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def submit(self, button_css: str):
        """Click a submit button and wait for the next page to load."""
        old = self.find("html")
        self.find(button_css).click()
        self.wait(lambda d: _stale(old), "the page did not change")

    @property
    def path(self) -> str:
        return self.driver.current_url.removeprefix(self.base)

    @property
    def text(self) -> str:
        return self.find("body").text

    def choose(self, name: str, value: str):
        self.find(f'input[name="{name}"][value="{value}"]').click()

    def select(self, name: str, value: str):
        from selenium.webdriver.support.select import Select

        Select(self.find(f'select[name="{name}"]')).select_by_value(value)

    def type(self, name: str, text: str):
        field = self.find(f'[name="{name}"]')
        field.clear()
        field.send_keys(text)

    def shoot(self, path, *, width: int, mobile: bool = False, max_height: int = 4000):
        """A full-page PNG at a given CSS width (CDP: the whole document, not just the viewport)."""
        cdp = self.driver.execute_cdp_cmd
        cdp(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 100, "deviceScaleFactor": 1, "mobile": mobile},
        )
        height = self.driver.execute_script(
            "return Math.max(Math.ceil(document.body.getBoundingClientRect().bottom),"
            " document.documentElement.scrollHeight)"
        )
        height = min(height, max_height)
        cdp(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )
        shot = cdp("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
        cdp("Emulation.clearDeviceMetricsOverride", {})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


def _stale(element) -> bool:
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.tag_name
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        # Mid-navigation Chromium may say the same thing in other words.
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


@pytest.fixture
def page(browser, live_server, staff_user, world):
    driver = browser
    # A person in Berlin: the create form suggests the browser's zone for cron loops.
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Europe/Berlin"})
    page = Page(driver, live_server.url)
    page.go("/admin/login/")
    driver.delete_all_cookies()
    return page


def log_in(page: Page):
    page.go("/panel/")
    assert page.path.startswith("/admin/login/?next=/panel/")
    page.type("username", "ada")
    page.type("password", PASSWORD)
    page.submit('input[type="submit"]')
    assert page.path == "/panel/"


def row(page: Page, loop_id: str):
    return page.find(f'tr[id="{loop_id}"]')
