"""`manage.py bootstrap`: first-run set-up for `make run` — an admin user and an API token.

Both are printed once, when they are created; later runs print nothing new.
"""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from tokens.models import ApiToken
from tokens.services import token_create


class Command(BaseCommand):
    help = "Ensure an admin user and an API token exist (printing them the first time)."

    def handle(self, *args, **options):
        User = get_user_model()
        if not User.objects.filter(is_superuser=True).exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser("admin", "", password)
            self.stdout.write(f"Admin user created: admin / {password}  (log in at http://127.0.0.1:8000/admin/)")
        if not ApiToken.objects.exists():
            _, raw = token_create(name="local", scopes=["tools", "host"])
            self.stdout.write(f"API token created (scopes tools, host): {raw}")
