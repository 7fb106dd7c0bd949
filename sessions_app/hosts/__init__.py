"""Pick the host implementation named by DSHLOOP_HOST."""

from __future__ import annotations

from functools import cache

from django.conf import settings

from .base import Host


@cache
def _host_for(kind: str) -> Host:
    if kind == "local":
        from .local import LocalHost

        return LocalHost()
    raise NotImplementedError(f"DSHLOOP_HOST={kind!r} is not available yet")


def get_host() -> Host:
    return _host_for(settings.DSHLOOP_HOST)
