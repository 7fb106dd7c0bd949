"""The sizes every layer agrees on: the largest integer a JSON reader keeps exact, and how long an
identifier or a display name may be (the columns, the tool schemas and the panel's inputs)."""

from __future__ import annotations

MAX_SAFE_INTEGER = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER: DSH Web reads our integers
MAX_ID_CHARS = 255
MAX_NAME_CHARS = 120
