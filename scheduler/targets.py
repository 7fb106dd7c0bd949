"""Resolve a loop's target to a concrete, awake session at delivery time (spec §2.1, §5)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, cast

from django.conf import settings
from django.db import transaction

from scheduler.message import Source, fresh_session_title
from scheduler.rows import DeliveryLoop, RunRow
from sessions_app.hosts.base import NO_PLACEMENT, Host, Placement, SessionModels
from sessions_app.models import ReservedTarget
from sessions_app.records import SessionInfo


class PermanentFailure(Exception):
    """Retrying cannot help (target gone, preset gone, no global interface)."""


@dataclass(frozen=True)
class DeliveryTarget:
    session_id: str
    status: str
    fallback: str = ""  # what was inherited from the profile default, and why


def host_savepoint(host: Host) -> AbstractContextManager[object]:
    """A savepoint around a host call that writes in the caller's transaction (the embedded host's):
    if the call raises, its writes are undone and the transaction goes on. A remote host's writes
    are not in any transaction of ours: nothing to undo."""
    return transaction.atomic() if host.capabilities.transactional else nullcontext()


class BatchView:
    """The host as seen by one delivery batch: the batch's sessions are looked up in one go."""

    def __init__(self, host: Host, session_ids: set[str]):
        self.host = host
        self.sessions = host.get_sessions(session_ids - {"", *ReservedTarget.values})
        self._global: list[SessionInfo | None] = []

    def get_session(self, session_id: str) -> SessionInfo | None:
        if session_id in self.sessions:
            return self.sessions[session_id]
        return self.host.get_session(session_id)

    def global_session(self) -> SessionInfo | None:
        if not self._global:
            self._global.append(self.host.global_session())
        return self._global[0]

    # The embedded host writes resumes and fresh sessions in the batch's transaction: each in a
    # savepoint, so that one the database refuses fails only its own run, not the whole batch.
    def resume_session(self, session_id: str) -> SessionInfo:
        with host_savepoint(self.host):
            self.sessions[session_id] = self.host.resume_session(session_id)
        return self.sessions[session_id]

    def create_session(
        self, *, preset: str, model: str, first_prompt: str, source: Source, placement: Placement = NO_PLACEMENT
    ) -> str:
        with host_savepoint(self.host):
            return self.host.create_session(
                preset=preset, model=model, first_prompt=first_prompt, source=source, placement=placement
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.host, name)


def _awake(host: Host, session: SessionInfo) -> SessionInfo:
    # spec §5: a cold target is resumed first, with no preset and no model override.
    return host.resume_session(session.session_id) if session.status == "cold" else session


def _new_session(host: Host, loop: DeliveryLoop, run: RunRow, source: Source) -> DeliveryTarget:
    """spec §2.1: the chosen preset, else the creator's; the model is always the creator's.

    The creator is the source of inheritance (panel-made loops record the global interface as their
    creator, contract §2). If it is gone, or there is none (no caller and no global interface), the
    profile default is used and said so, never another session's configuration.
    """
    if loop.preset:
        preset = host.get_preset(loop.preset)
        if preset is None or not preset.mountable:
            raise PermanentFailure(f"Preset {loop.preset!r} is gone or no longer mountable; recreate the loop.")
    origin = host.get_session(loop.created_by_session_id) if loop.created_by_session_id else None
    if origin is not None and host.capabilities.session_models:
        # The host's session records leave the model out (DSH): it is asked for this one session.
        origin = replace(origin, model=cast(SessionModels, host).session_model(origin.session_id))
    fallbacks = []
    if loop.preset:
        preset_name = loop.preset
    elif origin and origin.preset:
        preset_name = origin.preset
    else:
        preset_name = settings.DSHLOOP_DEFAULT_PRESET
        fallbacks.append("preset")
    if origin and origin.model:
        model = origin.model
    else:
        model = settings.DSHLOOP_DEFAULT_MODEL
        fallbacks.append("model")
    fallback = ""
    if fallbacks:
        if not loop.created_by_session_id:  # made with no caller and no global interface (services.loop_create)
            why = "created without a source session"
        elif origin is None:
            why = f"source session {loop.created_by_session_id!r} unavailable"
        else:
            why = "source has none"
        fallback = f"profile default {' and '.join(fallbacks)} ({why})"
    title = fresh_session_title(name=loop.name, prompt=loop.prompt, scheduled_at=run.scheduled_at, tz=loop.tz)
    placement = Placement(loop.workspace, loop.permission_preset, title)
    session_id = host.create_session(
        preset=preset_name, model=model, first_prompt=loop.prompt, source=source, placement=placement
    )
    return DeliveryTarget(session_id, "idle", fallback)


def resolve_target(host: Host, loop: DeliveryLoop, run: RunRow, source: Source) -> DeliveryTarget:
    # The target the run was claimed with: an edit while it is in flight applies to later runs
    # (a run in flight finishes with its old revision).
    target = run.target or loop.session_id
    if target == ReservedTarget.NEW:
        if run.target_session_id:  # made on an earlier attempt of this occurrence
            session = host.get_session(run.target_session_id)
            if session:
                session = _awake(host, session)  # it may have gone cold since that attempt
                return DeliveryTarget(session.session_id, session.status)
        return _new_session(host, loop, run, source)
    if target == ReservedTarget.SELF:
        session = host.global_session()
        if session is None:
            raise PermanentFailure('No global interface session is available for target "self".')
    else:
        session = host.get_session(target)
        if session is None:
            raise PermanentFailure(f"Target session {target!r} no longer exists.")
    session = _awake(host, session)
    return DeliveryTarget(session.session_id, session.status)
