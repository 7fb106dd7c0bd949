"""dshloop as an MCP server: the five tools over stdio (`manage.py mcp`) and streamable HTTP (/mcp).

`server` turns the tool catalogue (tools.catalogue) into an MCP server whose calls run
tools.call.call_tool, the same functions POST /api/tools/<name> runs; `stdio` and `http` are its
two transports.
"""
