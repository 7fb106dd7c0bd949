"""The deprecated v1 tool inputs (spec §10): who still uses them, logged once per caller."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

logger = logging.getLogger("dshloop.tools")

# spec §10: the deprecated v1 aliases (loop_create time_in_seconds, loop_delete {id}). Operators need to
# see *who* still speaks v1, not one line per call: each (alias, caller) pair is logged once per
# process, at WARNING. The memory is a small LRU of at most ALIAS_CALLERS_REMEMBERED pairs, so a
# stream of distinct callers cannot grow it; a caller pushed out of it is simply named again.
ALIAS_CALLERS_REMEMBERED = 4096
_alias_callers: OrderedDict[tuple[str, str], None] = OrderedDict()
_alias_callers_lock = threading.Lock()  # the server may handle requests on several threads


def log_deprecated_alias(alias: str, *, caller_session_id: str | None) -> bool:
    """Log the first use of a deprecated alias by a caller; returns whether it logged."""
    key = (alias, caller_session_id or "")
    with _alias_callers_lock:
        if key in _alias_callers:
            _alias_callers.move_to_end(key)
            return False
        _alias_callers[key] = None
        while len(_alias_callers) > ALIAS_CALLERS_REMEMBERED:
            _alias_callers.popitem(last=False)
    logger.warning(
        "deprecated v1 alias %s used by session %s; switch it to the v2 form (logged once per caller)",
        alias,
        repr(caller_session_id) if caller_session_id else "(none: no X-DSH-Session-Id)",
    )
    return True
