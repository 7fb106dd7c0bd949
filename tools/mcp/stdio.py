"""The stdio transport: one local MCP client, one calling session fixed when the server starts."""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from .server import INSTRUCTIONS, build_server


def stdio_instructions(session_id: str | None) -> str:
    if session_id:
        return f"{INSTRUCTIONS} Your session is {session_id!r}: an omitted session_id means this session."
    return (
        f"{INSTRUCTIONS} This server was started without --session, so there is no current session: "
        "name a session_id when you create or list loops."
    )


async def serve_stdio(*, session_id: str | None) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin.

    No token: the user who launched the process already holds the database it opens.
    """
    server = build_server(caller_of=lambda ctx: session_id, instructions=stdio_instructions(session_id))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
