"""Names the HTTP edge shares (the WSGI layer, the API, the MCP transport): one of each."""

from __future__ import annotations

# contract §2: the calling agent's session (the current local session).
CALLER_HEADER = "X-DSH-Session-Id"
# A loop_create's idempotency key, per calling session (tools.idempotency); the name RFC drafts and
# dshloop's HTTP host adapter use for the same idea.
IDEMPOTENCY_HEADER = "Idempotency-Key"
# The same header as WSGI's environ names it (PEP 3333).
CALLER_META_KEY = "HTTP_" + CALLER_HEADER.upper().replace("-", "_")
# The request path's bytes as the server gave them (dshloop.wsgi keeps them; dshloop.api reads them).
RAW_PATH_INFO = "dshloop.raw_path_info"
