"""`manage.py mcp --session <session_id>`: dshloop's five tools as an MCP server over stdio.

An MCP client (an agent harness) launches this command and speaks JSON-RPC on its stdin and
stdout; logs go to stderr. The calling session is fixed by --session for the whole connection,
as X-DSH-Session-Id is for one HTTP call. No token: whoever can run manage.py already has the
database. For remote agents use the HTTP transport at /mcp (bearer token, scope tools).
"""

from __future__ import annotations

import anyio
from django.core.management.base import BaseCommand, CommandError

from core.errors import ApiError
from core.validation import check_identifier
from sessions_app.schemas import SessionId


class Command(BaseCommand):
    help = "Serve the dshloop tools over MCP on stdin/stdout for the session given by --session."

    def add_arguments(self, parser):
        parser.add_argument(
            "--session",
            dest="session_id",
            metavar="SESSION_ID",
            help="The calling agent's session (what X-DSH-Session-Id is over HTTP). Without it there is no "
            "current session: loop_create then needs a session_id and loop_list {} is refused.",
        )

    def handle(self, *args, session_id: str | None, **options):
        if session_id is not None:
            try:
                # The tools refuse the same values as their caller: say so now, not on every call.
                session_id = check_identifier(session_id, field="--session", kind=SessionId)
            except ApiError as error:
                message = error.message if "--session" in error.message else f"--session: {error.message}"
                raise CommandError(message) from error
        from tools.mcp.stdio import serve_stdio  # the SDK is slow to import: refuse bad flags first

        try:
            anyio.run(lambda: serve_stdio(session_id=session_id))
        except KeyboardInterrupt:
            pass
