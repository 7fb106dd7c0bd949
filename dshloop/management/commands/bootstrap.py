"""`manage.py bootstrap`: first-run set-up for `make run` — an admin user, an API token and, on the
embedded host, the global interface session.

Each is announced once, when it is created; later runs print nothing new.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from sessions_app.hosts import get_host
from sessions_app.hosts.base import HostError
from sessions_app.models import SessionHeader
from sessions_app.selectors import global_session_get
from sessions_app.services import session_upsert
from tokens.models import ApiToken
from tokens.services import token_create

GLOBAL_SESSION_ID = "ses_global"
GLOBAL_SESSION_TITLE = "Global interface"
DSH_GLOBAL_SESSION_TITLE = "dshloop: global interface"
DEFAULT_URL = "http://127.0.0.1:8000"  # `manage.py serve`'s default address


class Command(BaseCommand):
    help = (
        "Ensure an admin user, an API token and (embedded host) a global interface session exist, "
        "printing each the first time."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--url",
            default=DEFAULT_URL,
            help=f"where dshloop will answer, for the admin sign-in line (default {DEFAULT_URL}, as `make run` serves)",
        )
        parser.add_argument(
            "--without-host",
            action="store_true",
            help="skip the global interface session on DSH (make run-dsh runs bootstrap again once DSH answers)",
        )

    def handle(self, *args, without_host=False, url=DEFAULT_URL, **options):
        User = get_user_model()
        if not User.objects.filter(is_superuser=True).exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser("admin", "", password)
            self.stdout.write(f"Admin user created: admin / {password}  (log in at {url.rstrip('/')}/admin/)")
        if not ApiToken.objects.exists():
            _, raw = token_create(name="local", scopes=["tools", "host", "manage"])
            self.stdout.write(f"API token created (scopes tools, host, manage): {raw}")
        if settings.DSHLOOP_HOST == "local":
            self.ensure_global_session()
        elif settings.DSHLOOP_HOST == "dsh" and not without_host:
            self.ensure_dsh_global_session()

    def ensure_global_session(self) -> None:
        """A fresh install has a global interface, so `self` and the panel's loops work.

        Only on the embedded host, where dshloop *is* the host; an HTTP host owns its sessions.
        """
        if global_session_get() is not None:
            return
        session_id = settings.DSHLOOP_GLOBAL_SESSION_ID or GLOBAL_SESSION_ID
        changes: dict[str, object] = {"global_interface": True}
        if not SessionHeader.objects.filter(session_id=session_id).exists():
            changes["user_title"] = GLOBAL_SESSION_TITLE  # an existing session keeps its own title
        session_upsert(session_id=session_id, changes=changes)
        self.stdout.write(f'Global interface session created: {session_id} (the target "self")')

    def ensure_dsh_global_session(self) -> None:
        """On DSH too, `self` works out of the box. DSH has no global interface, so one
        stable session (DSHLOOP_GLOBAL_SESSION_ID, default dshloop-global) is made in DSH once. DSH
        down is not fatal: the next bootstrap makes it, and until then `self` is unavailable."""
        from sessions_app.hosts.dsh import DshHost  # the dsh host's module: only when it is the host

        host = get_host()
        assert isinstance(host, DshHost)  # DSHLOOP_HOST is "dsh" (handle)
        try:
            created = host.ensure_global_session(DSH_GLOBAL_SESSION_TITLE)
        except HostError as exc:
            self.stderr.write(f"The global interface session was not made in DSH ({exc}); `self` waits for it.")
            return
        if created:
            self.stdout.write(
                f"Global interface session created in DSH: {settings.DSHLOOP_GLOBAL_SESSION_ID} "
                f'("{DSH_GLOBAL_SESSION_TITLE}", the target "self")'
            )
