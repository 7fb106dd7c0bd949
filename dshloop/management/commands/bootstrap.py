"""`manage.py bootstrap`: first-run set-up for `make run` — an admin user, an API token and, on a
host that makes one (Capabilities.makes_global_session), the global interface session.

Each is announced once, when it is created; later runs print nothing new.
"""

from __future__ import annotations

import secrets
from typing import cast

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from sessions_app.hosts import get_host
from sessions_app.hosts.base import GlobalSessionMaker, HostError
from tokens.models import ApiToken
from tokens.services import token_create

DEFAULT_URL = "http://127.0.0.1:8000"  # `manage.py serve`'s default address


class Command(BaseCommand):
    help = (
        "Ensure an admin user, an API token and (on a host that makes one) a global interface session "
        "exist, printing each the first time."
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
            help="skip the global interface session on a host outside dshloop's database, e.g. DSH "
            "(make run-dsh runs bootstrap again once DSH answers)",
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
        self.ensure_global_session(without_host=without_host)

    def ensure_global_session(self, *, without_host: bool) -> None:
        """`self` and the panel's loops work out of the box. A host whose sessions live in dshloop's
        database is always there; another one down is not fatal: the next bootstrap makes it, and
        until then `self` is unavailable."""
        host = get_host()
        if not host.capabilities.makes_global_session or (without_host and not host.capabilities.transactional):
            return
        try:
            made = cast(GlobalSessionMaker, host).ensure_global_session()
        except HostError as exc:
            self.stderr.write(f"The global interface session was not made ({exc}); `self` waits for it.")
            return
        if made:
            self.stdout.write(made)
