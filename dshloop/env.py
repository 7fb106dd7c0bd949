"""Readers of dshloop's environment variables for dshloop.settings: each reads one variable, typed,
and fails loudly (ImproperlyConfigured) on a bad value, so a typo in production is a start-up
error, not a silent default."""

from __future__ import annotations

import os
import re
import zoneinfo
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool = False) -> bool:
    raw = env_str(name)
    if not raw:
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), not {raw!r}.")


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    raw = env_str(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}.") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}.")
    return value


def env_int_list(name: str, default: list[int]) -> list[int]:
    """Comma-separated positive integers, e.g. "30,60,300"."""
    raw = env_str(name)
    if not raw:
        return default
    try:
        values = [int(item) for item in raw.split(",")]
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be comma-separated integers, not {raw!r}.") from None
    if not values or min(values) < 1:
        raise ImproperlyConfigured(f"{name} must list at least one integer, each at least 1, not {raw!r}.")
    return values


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name)
    return [item.strip() for item in raw.split(",") if item.strip()] if raw else default


def env_choice(name: str, default: str, choices: set[str]) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {sorted(choices)}, not {value!r}.")
    return value


def env_listed(name: str, default: str, allowed: list[str], *, listed_in: str) -> str:
    """One of the values another setting lists (`listed_in`), e.g. the default among the choices."""
    value = env_str(name) or default
    if value not in allowed:
        raise ImproperlyConfigured(
            f"{name} must be one of {listed_in} ({', '.join(allowed)}), not {value!r}: choose one of those, "
            f"or add it to {listed_in}."
        )
    return value


def env_int_over(name: str, default: int, *, floor: int, why: str) -> int:
    """An integer that must exceed `floor`, a bound other settings give (`why` says which)."""
    value = env_int(name, default)
    if value <= floor:
        raise ImproperlyConfigured(f"{name} must be more than {floor} ({why}), not {value}.")
    return value


def env_time_zone(name: str, default: str) -> str:
    value = env_str(name, default)
    if value not in zoneinfo.available_timezones():
        raise ImproperlyConfigured(f"{name} must be an IANA time-zone name, not {value!r}.")
    return value


def _is_origin(text: str) -> bool:
    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # a port that is not a number, or out of range
        return False
    return (
        parts.scheme in {"http", "https"}
        and bool(parts.hostname)
        and port_ok
        and not (parts.path or parts.query or parts.fragment or "@" in parts.netloc)
    )


def env_origins(name: str) -> list[str]:
    """A comma list of origins as CSRF_TRUSTED_ORIGINS compares them: scheme://host[:port], no path
    (Django matches the browser's Origin header exactly, so "https://x.org/" would never match)."""
    origins = env_list(name, [])
    for origin in origins:
        if not _is_origin(origin):
            raise ImproperlyConfigured(
                f"{name} must be a comma-separated list of origins such as https://loops.example.com "
                f"(scheme and host, optionally :port, or https://*.example.com), not {origin!r}."
            )
    return origins


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """SECURE_PROXY_SSL_HEADER from "HTTP_X_FORWARDED_PROTO=https": the header the proxy sets, named
    as Django's request.META names it, and the value that means the client used HTTPS."""
    raw = env_str(name)
    if not raw:
        return None
    header, _, value = (part.strip() for part in raw.partition("="))
    if not re.fullmatch(r"HTTP_[A-Z0-9_]+", header) or not re.fullmatch(r"[^\s=]+", value):
        raise ImproperlyConfigured(
            f"{name} must look like HTTP_X_FORWARDED_PROTO=https (the header your proxy sets, as "
            f"request.META names it, then '=' and the value it sends for HTTPS), not {raw!r}."
        )
    return header, value


def read_key_file(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""
