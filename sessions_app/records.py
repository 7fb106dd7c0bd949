"""What a host tells about a session or a preset: plain values, read by the selectors and the hosts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    status: str  # running | idle | cold
    updated_at: datetime
    title: str | None = None
    preset: str = ""
    model: str = ""
    global_interface: bool = False


@dataclass(frozen=True)
class PresetInfo:
    name: str
    mountable: bool
