"""Epoch milliseconds live only at the API edge; inside, aware UTC datetimes (STYLE §7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def from_ms(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def truncate_to_ms(moment: datetime) -> datetime:
    """Stored times equal what the API shows, so a grid built on them matches to the ms."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")
