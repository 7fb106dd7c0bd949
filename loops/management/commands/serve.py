"""`manage.py serve`: the API, the panel and the scheduler in one foreground process group.

Ctrl-C reaches every process of the group; the scheduler stops itself gracefully and this
command waits for it.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


def _interrupt(signum, frame):
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Serve the API and panel and run the scheduler (for `make run`)."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args, addrport, **options):
        # SIGTERM stops us like Ctrl-C does (and Ctrl-C works even if a shell ignored SIGINT).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
        scheduler = subprocess.Popen([sys.executable, str(settings.BASE_DIR / "manage.py"), "runloops"])
        try:
            call_command("runserver", addrport, use_reloader=False, use_threading=True)
        except KeyboardInterrupt:
            pass
        finally:
            if scheduler.poll() is None:
                scheduler.send_signal(signal.SIGTERM)
            try:
                scheduler.wait(timeout=15)
            except subprocess.TimeoutExpired:
                scheduler.kill()
