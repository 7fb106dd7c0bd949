"""Pick the host implementation named by DSHLOOP_HOST (contract §1)."""

from __future__ import annotations

from functools import cache

from django.conf import settings

from .base import Host


@cache
def _host_for(
    kind: str, url: str, token: str, global_session_id: str, timeout: float, dsh_url: str, dsh_cwd: str
) -> Host:
    # Each host's module is imported once it is chosen: the remote ones pull in httpx (and rich,
    # pydantic), megabytes a process that the embedded host never needs.
    if kind == "http":
        from .http import HttpHost

        return HttpHost(url, token, global_session_id=global_session_id, timeout=timeout)
    if kind == "dsh":
        from .dsh import DshHost

        return DshHost(dsh_url, cwd=dsh_cwd, global_session_id=global_session_id, timeout=timeout)
    from .local import LocalHost

    return LocalHost()


def get_host() -> Host:
    # Keyed by the settings, so a test that switches hosts gets the right one.
    return _host_for(
        settings.DSHLOOP_HOST,
        settings.DSHLOOP_HOST_URL,
        settings.DSHLOOP_HOST_TOKEN,
        settings.DSHLOOP_GLOBAL_SESSION_ID,
        settings.DSHLOOP_HOST_TIMEOUT_SECONDS,
        settings.DSHLOOP_DSH_URL,
        settings.DSHLOOP_DSH_CWD,
    )


def global_session_id() -> str | None:
    """The global interface session's ID as the host names it now, or None while there is none."""
    session = get_host().global_session()
    return session.session_id if session is not None else None
