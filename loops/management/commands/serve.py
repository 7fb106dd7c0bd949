"""`manage.py serve`: the API, the panel, the MCP endpoint and the scheduler in one foreground process group.

One uvicorn server answers on addrport: /mcp is the MCP streamable HTTP transport, every other
path is Django (see dshloop.asgi). Ctrl-C reaches every process of the group; SIGTERM stops us
like Ctrl-C. The scheduler stops itself gracefully and this command waits for it.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def parse_addrport(addrport: str) -> tuple[str, int]:
    """runserver's forms: "8000", "127.0.0.1:8000", "[::1]:8000"."""
    host, _, port = addrport.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError(f"{addrport!r} is not a port or address:port.")
    return host, int(port)


class Command(BaseCommand):
    help = "Serve the API, panel and MCP endpoint and run the scheduler (for `make run`)."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args, addrport, **options):
        import uvicorn

        host, port = parse_addrport(addrport)
        # SIGTERM stops us like Ctrl-C does (and Ctrl-C works even if a shell ignored SIGINT).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
        scheduler = subprocess.Popen([sys.executable, str(settings.BASE_DIR / "manage.py"), "runloops"])
        try:
            from dshloop.asgi import application

            # uvicorn traps SIGINT/SIGTERM while it serves, shuts down, then raises the signal again:
            # our handlers turn it into the KeyboardInterrupt below.
            uvicorn.Server(uvicorn.Config(
                application, host=host, port=port, lifespan="on", timeout_graceful_shutdown=5,
            )).run()
        except KeyboardInterrupt:
            pass
        finally:
            if scheduler.poll() is None:
                scheduler.send_signal(signal.SIGTERM)
            try:
                scheduler.wait(timeout=15)
            except subprocess.TimeoutExpired:
                scheduler.kill()
