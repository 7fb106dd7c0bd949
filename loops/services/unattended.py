"""What bounds a `new` loop's unattended runs where it is made (contract §14): the workspace its
fresh sessions start in, captured from its creator, and the permission preset they run under.
The run timeout, overlap and capacity rules are the scheduler's (scheduler.unattended)."""

from __future__ import annotations

from typing import cast

from django.conf import settings

from core.errors import InvalidInput
from loops.models import Overlap
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Workspaces

UNATTENDED_FIELDS = ("workspace", "permission_preset", "overlap")


def captured_workspace(creator: str) -> str:
    """The directory the creating session works in, where the loop's fresh sessions will start;
    "" when the host has no workspaces, there is no creator, or the host no longer knows it (then
    the host's default, DSHLOOP_DSH_CWD, is used). A host that cannot be asked raises HostError."""
    host = get_host()
    if not creator or not host.capabilities.workspaces:
        return ""
    return cast(Workspaces, host).session_workspace(creator)


def unattended_defaults(*, creator: str) -> dict[str, str]:
    """The §14 fields a loop gets when it comes to target `new` (made so, or edited to it)."""
    return {
        "workspace": captured_workspace(creator),
        "permission_preset": settings.DSHLOOP_DEFAULT_PERMISSION_PRESET,
        "overlap": Overlap.ALLOW,
    }


def check_workspace(workspace: str | None) -> None:
    """A workspace the host can tell it could not start a session in (it does not exist, is no
    directory, or cannot be read) is refused now, on its field, instead of failing the loop's next
    run. A host without workspaces ignores them, so it is not asked; one that cannot be asked
    raises HostError. Host I/O: call it before the loop's row is locked."""
    host = get_host()
    if not workspace or not host.capabilities.workspaces:
        return
    problem = cast(Workspaces, host).directory_problem(workspace)
    if problem:
        raise InvalidInput(
            f"The host cannot start sessions in {workspace!r} ({problem}); give an existing directory on the "
            "host, or null for the host's default.",
            field="workspace",
        )


def check_permission_preset(preset: str | None) -> None:
    """A preset the host offers (DSHLOOP_PERMISSION_PRESETS), or None for the host's own default."""
    presets = settings.DSHLOOP_PERMISSION_PRESETS
    if preset is not None and preset not in presets:
        raise InvalidInput(
            f"Unknown permission preset {preset!r}; the host offers {', '.join(presets)} (DSHLOOP_PERMISSION_PRESETS).",
            field="permission_preset",
        )
