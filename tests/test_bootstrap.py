"""`manage.py bootstrap` (run by `make run`): on the embedded host a fresh install gets its global
interface session, so `self` and the panel work from the first start (defect 4); on any host, the
host that declares it makes one (Capabilities.makes_global_session) is the one asked."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from sessions_app.hosts.base import Capabilities, HostError
from sessions_app.models import SessionHeader
from sessions_app.services import session_upsert

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # bootstrap makes an admin


def bootstrap() -> list[str]:
    out = StringIO()
    call_command("bootstrap", stdout=out)
    return out.getvalue().splitlines()


def global_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("Global interface session")]


def globals_() -> list[tuple[str, str]]:
    return list(SessionHeader.objects.filter(global_interface=True).values_list("session_id", "user_title"))


def test_a_fresh_install_gets_the_global_interface_once_on_the_embedded_host_only(settings):
    # Not on the HTTP host: there the DSH host owns its sessions (dshloop's rows only cache them).
    settings.DSHLOOP_HOST = "http"
    on_http = bootstrap()
    assert global_lines(on_http) == [] and not SessionHeader.objects.exists()
    assert any(line.startswith("Admin user created") for line in on_http)  # the rest still happens

    settings.DSHLOOP_HOST = "local"
    first = bootstrap()
    assert first == ['Global interface session created: ses_global (the target "self")']
    assert globals_() == [("ses_global", "Global interface")]
    header = SessionHeader.objects.get(session_id="ses_global")
    assert (header.status, header.preset, header.model) == ("idle", "", "")

    assert bootstrap() == []  # idempotent, and silent the second time
    assert globals_() == [("ses_global", "Global interface")]


def test_an_existing_global_interface_is_left_alone(settings):
    settings.DSHLOOP_HOST = "local"
    session_upsert(session_id="ses_mine", changes={"global_interface": True, "user_title": "Mine"})
    assert global_lines(bootstrap()) == []
    assert globals_() == [("ses_mine", "Mine")]
    assert not SessionHeader.objects.filter(session_id="ses_global").exists()


def test_a_configured_global_session_id_is_the_one_created(settings):
    settings.DSHLOOP_HOST = "local"
    settings.DSHLOOP_GLOBAL_SESSION_ID = "ses_configured"
    assert global_lines(bootstrap()) == ['Global interface session created: ses_configured (the target "self")']
    assert globals_() == [("ses_configured", "Global interface")]
    assert global_lines(bootstrap()) == []


def test_an_unflagged_ses_global_is_flagged_and_keeps_its_title(settings):
    settings.DSHLOOP_HOST = "local"
    session_upsert(session_id="ses_global", changes={"user_title": "Renamed by someone", "preset": "coder"})
    assert len(global_lines(bootstrap())) == 1
    assert globals_() == [("ses_global", "Renamed by someone")]
    assert SessionHeader.objects.get(session_id="ses_global").preset == "coder"


class MakerHost:
    """A host outside dshloop's database that makes its own global interface session, whatever
    DSHLOOP_HOST says: bootstrap goes by what a host declares, not by its name."""

    capabilities = Capabilities(delivery_batch=1, transactional=False, makes_global_session=True)

    def __init__(self, answer: str | HostError):
        self.answer = answer
        self.asked = 0

    def ensure_global_session(self) -> str:
        self.asked += 1
        if isinstance(self.answer, HostError):
            raise self.answer
        return self.answer


def test_the_global_session_is_made_by_whichever_host_declares_it_can(settings, monkeypatch):
    settings.DSHLOOP_HOST = "http"
    host = MakerHost('Global interface session created in Elsewhere: g-1 (the target "self")')
    monkeypatch.setattr("dshloop.management.commands.bootstrap.get_host", lambda: host)
    assert global_lines(bootstrap()) == ['Global interface session created in Elsewhere: g-1 (the target "self")']
    assert not SessionHeader.objects.exists()  # the host made it, not dshloop

    # --without-host: a host outside dshloop's database is not asked (it may not be up yet)...
    call_command("bootstrap", "--without-host", stdout=StringIO())
    assert host.asked == 1
    # ...and one that is down does not stop the set-up.
    host.answer = HostError("Elsewhere is unreachable.", transient=True)
    out, err = StringIO(), StringIO()
    call_command("bootstrap", stdout=out, stderr=err)
    assert (
        err.getvalue().strip()
        == "The global interface session was not made (Elsewhere is unreachable.); `self` waits for it."
    )


def test_the_embedded_host_makes_its_global_session_even_without_host(settings):
    settings.DSHLOOP_HOST = "local"
    out = StringIO()
    call_command("bootstrap", "--without-host", stdout=out)  # its sessions are dshloop's own rows
    assert global_lines(out.getvalue().splitlines()) == [
        'Global interface session created: ses_global (the target "self")'
    ]


def test_the_admin_line_names_the_url_it_is_served_on():
    # make run serves on 8000; make run-dsh passes the port it serves on (DSHLOOP_PORT).
    out = StringIO()
    call_command("bootstrap", "--url", "http://127.0.0.1:8765", stdout=out)
    [line] = [line for line in out.getvalue().splitlines() if line.startswith("Admin user created")]
    assert line.endswith("(log in at http://127.0.0.1:8765/admin/)")
