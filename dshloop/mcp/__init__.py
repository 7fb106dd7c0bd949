"""dshloop as an MCP server: the five tools over stdio (`manage.py mcp`) and streamable HTTP (/mcp).

`dispatch` runs one tool call exactly as `POST /api/tools/<name>` does, `server` turns the tool
catalogue (dshloop.tools) into an MCP server, `stdio` and `http` are its two transports.
"""
