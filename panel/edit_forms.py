"""The panel's edit form (contract §9 edit): the create form (panel.forms) pre-filled from a loop,
plus its display name; only the fields that differ from the loop go to loop_edit_from."""

from __future__ import annotations

from typing import cast

from django import forms
from django.conf import settings
from django.http import QueryDict
from django.utils import timezone
from pydantic import ValidationError

from core.errors import ApiError, host_unavailable
from core.limits import MAX_NAME_CHARS
from core.timeutil import to_ms
from core.validation import invalid_input_from
from loops.models import Loop
from loops.presenters import schedule_view
from loops.schemas import LoopPatchIn
from loops.services import edit
from panel.forms import ENDS_AT_FORMAT, OTHER_WORKSPACE, OVERLAP_WORDS, UNATTENDED_FORM_FIELDS, UNITS, LoopCreateForm
from sessions_app.hosts.base import HostError
from sessions_app.models import ReservedTarget
from timing import schedules


def amount_and_unit(seconds: int) -> tuple[int, str]:
    """A duration as the form shows it: in the largest unit that divides it (5400 -> 90 minutes)."""
    for value, _label in reversed(UNITS):
        if seconds % int(value) == 0:
            return seconds // int(value), value
    raise AssertionError("unreachable: every integer is divisible by 1")


def initial_for(loop: Loop) -> dict:
    """The edit form's values for a loop as it is."""
    initial = {"name": loop.name, "prompt": loop.prompt, "kind": loop.schedule.kind, "revision": loop.revision}
    initial.update(
        ends_at=loop.ends_at and timezone.localtime(loop.ends_at).replace(microsecond=0), max_runs=loop.max_runs
    )
    if loop.session_id in (ReservedTarget.SELF, ReservedTarget.NEW):
        initial["target"] = loop.session_id
    else:
        initial.update(target="session", session=loop.session_id)
    if loop.session_id == ReservedTarget.NEW:
        initial.update(
            preset=loop.preset,
            workspace=loop.workspace,
            permission_preset=loop.permission_preset,
            overlap=loop.overlap,
        )
    match loop.schedule:
        case schedules.Every(every_seconds=seconds):
            initial["every_amount"], initial["every_unit"] = amount_and_unit(seconds)
        case schedules.After(after_seconds=seconds):
            initial["after_amount"], initial["after_unit"] = amount_and_unit(seconds)
        case schedules.Cron(expr=expr, tz=tz):
            initial.update(cron_expr=expr, tz=tz or "")
    return initial


def _same_text(a: str, b: str) -> bool:
    # A browser sends a textarea's line breaks as CRLF (HTML's form encoding): the same prompt.
    return a.replace("\r\n", "\n").strip() == b.replace("\r\n", "\n").strip()


class LoopEditForm(LoopCreateForm):
    """The create form, pre-filled from a loop, plus its display name (contract §9 PATCH).

    Only the fields that differ from the loop go to loop_edit_from, validated by the same
    LoopPatchIn as PATCH /api/loops/{id}. `revision` is the one the page showed: if the loop was
    edited meanwhile the form says so instead of writing its older values over the newer ones.

    A loop that targets `new` also shows its workspace (a menu of the host's workspaces and the
    loop's own, or a typed directory), permission preset and overlap (contract §14); other loops
    have none of these fields, and a loop that becomes `new` gets the service's defaults for them.
    """

    name = forms.CharField(
        required=False,  # empty: no name; the length rule (120) is LoopPatchIn's, with its message
        label="Name",
        widget=forms.TextInput(
            attrs={"maxlength": MAX_NAME_CHARS, "placeholder": "Optional, for people: “Morning report”"}
        ),
    )
    revision = forms.IntegerField(required=False, widget=forms.HiddenInput)
    # contract §14 (only for a loop that targets `new`). Plain text under a menu: whether a value
    # is acceptable is the service's decision (LoopPatchIn, check_permission_preset), with its message.
    workspace = forms.CharField(required=False, label="Workspace", widget=forms.Select)
    workspace_other = forms.CharField(
        required=False,
        label="Directory",
        widget=forms.TextInput(
            attrs={
                "placeholder": "/home/me/project",
                "spellcheck": "false",
                "autocapitalize": "off",
                "autocomplete": "off",
            }
        ),
    )
    permission_preset = forms.CharField(required=False, label="Permission preset", widget=forms.Select)
    overlap = forms.CharField(
        required=False, label="Overlap", widget=forms.RadioSelect(choices=list(OVERLAP_WORDS.items()))
    )
    # contract §16. Empty: no end, no limit. Whether a value is acceptable (in the future, above the
    # runs delivered) is the service's decision, with its message.
    ends_at = forms.DateTimeField(
        required=False,
        label="Ends at",
        input_formats=[ENDS_AT_FORMAT, "%Y-%m-%dT%H:%M"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format=ENDS_AT_FORMAT),
    )
    max_runs = forms.IntegerField(
        required=False, label="Ends after", widget=forms.NumberInput(attrs={"min": 1, "placeholder": "no limit"})
    )

    def __init__(
        self,
        *args,
        loop: Loop,
        sessions,
        global_session=None,
        presets=(),
        workspaces=(),
        default_workspace: str = "",
        workspaces_note: str = "",
        **kwargs,
    ):
        """workspaces: the directories the host offers (sessions_app.hosts.base.Workspaces);
        default_workspace: where a fresh session starts when the loop names none, if known;
        workspaces_note: why the host's workspaces are missing (it could not be asked)."""
        kwargs.setdefault("initial", initial_for(loop))
        presets = sorted({*presets, loop.preset} - {""})
        super().__init__(*args, sessions=sessions, global_session=global_session, presets=presets, **kwargs)
        self.loop = loop
        self.unattended = loop.session_id == ReservedTarget.NEW
        self.workspaces_note = workspaces_note
        if self.unattended:
            self._offer_unattended(workspaces, default_workspace)
        else:
            for name in UNATTENDED_FORM_FIELDS:
                del self.fields[name]
        if loop.session_id == ReservedTarget.SELF:
            # Keeping the target it has needs no global interface (only a change of target is checked).
            self.fields["target"].widget.unavailable = set()
        session_choices = self.fields["session"].widget.choices
        if loop.session_id not in (ReservedTarget.SELF, ReservedTarget.NEW) and loop.session_id not in {
            v for v, _ in session_choices
        }:
            session_choices.append((loop.session_id, f"{loop.session_id} (the current target)"))
        zone = getattr(loop.schedule, "tz", None)
        if zone and zone not in {v for v, _ in self.fields["tz"].widget.choices}:
            self.fields["tz"].widget.choices.append((zone, zone))
        if isinstance(loop.schedule, schedules.Cron):
            # panel.js would put the browser's zone in place of "host time zone": a change nobody asked for.
            self.fields["tz"].widget.attrs.pop("data-browser-zone", None)

    def _offer_unattended(self, workspaces, default_workspace: str) -> None:
        loop = self.loop
        default = f"Host default ({default_workspace})" if default_workspace else "Host default"
        known = sorted({*workspaces, loop.workspace} - {""})
        self.fields["workspace"].widget.choices = [
            ("", default),
            *((path, path) for path in known),
            (OTHER_WORKSPACE, "Another directory…"),
        ]
        presets = list(settings.DSHLOOP_PERMISSION_PRESETS)
        if loop.permission_preset not in presets:
            # Kept as it is unless changed: a preset since dropped from the list, or "" (the host's own).
            presets.insert(0, loop.permission_preset)
        self.fields["permission_preset"].widget.choices = [(p, p or "The host's own default") for p in presets]

    def clean(self):
        cleaned = super().clean()
        typed = self.unattended and cleaned.get("target") == ReservedTarget.NEW
        if typed and cleaned.get("workspace") == OTHER_WORKSPACE and not cleaned.get("workspace_other"):
            self.add_error("workspace_other", "Type the directory's absolute path, or choose the host default.")
        return cleaned

    def field_for(self, path: str | None) -> str | None:
        if path == "name":
            return "name"
        if path == "workspace" and self.cleaned_data.get("workspace") == OTHER_WORKSPACE:
            return "workspace_other"
        field = super().field_for(path)
        return field if field in self.fields else None  # a §14 field of a loop that is no longer `new`

    def _unattended_values(self) -> dict[str, str]:
        """The §14 values the form sent ("" for a workspace: the host default); a field that was
        not sent (a script's post) is left as it is."""
        data, sent = self.cleaned_data, {}
        if self.add_prefix("workspace") in self.data:
            choice = data.get("workspace", "")
            sent["workspace"] = data.get("workspace_other", "") if choice == OTHER_WORKSPACE else choice
        if self.add_prefix("permission_preset") in self.data:
            sent["permission_preset"] = data.get("permission_preset", "")
        if data.get("overlap"):
            sent["overlap"] = data["overlap"]
        return sent

    def patch(self) -> dict:
        """The PATCH body (contract §9) of what differs from the loop, before validation."""
        loop, body = self.loop, self.payload()
        patch = {}
        name = self.cleaned_data.get("name") or None
        if name != (loop.name or None):
            patch["name"] = name
        if not _same_text(body["prompt"], loop.prompt):
            patch["prompt"] = body["prompt"]
        if body["schedule"] != schedule_view(loop.schedule):
            patch["schedule"] = body["schedule"]
        target = body.get("session_id")
        if target != loop.session_id:
            patch["session_id"] = target
        if target == ReservedTarget.NEW and body.get("preset") != (loop.preset or None):
            patch["preset"] = body.get("preset")  # None: back to inheriting the creator's preset
        if target == ReservedTarget.NEW and self.unattended:
            for field, value in self._unattended_values().items():
                if value != getattr(loop, field):
                    # None: the workspace's host default, the host's own preset (LoopPatchIn).
                    patch[field] = value or None
        patch |= self._bounds()
        return patch

    def _bounds(self) -> dict:
        """contract §16: the ends_at (epoch ms; the form shows whole seconds, so an end set to the
        millisecond elsewhere is unchanged while its second is) and max_runs that changed; None clears."""
        changed: dict = {}
        if self.add_prefix("ends_at") in self.data:
            ends_at = self.cleaned_data.get("ends_at")
            current = self.loop.ends_at and self.loop.ends_at.replace(microsecond=0)
            if ends_at != current:
                changed["ends_at"] = None if ends_at is None else to_ms(ends_at)
        if self.add_prefix("max_runs") in self.data and self.cleaned_data.get("max_runs") != self.loop.max_runs:
            changed["max_runs"] = self.cleaned_data.get("max_runs")
        return changed

    def save(self, *, now=None) -> Loop | None:
        """Edit the loop through loop_edit_from with what changed (the loop as it is when
        nothing did), or put the contract's message on the right field. The edit reads the clock
        once it holds the loop's lock (loops.services.locking); `now` overrides it (tests)."""
        shown = self.cleaned_data.get("revision")
        if shown is not None and shown != self.loop.revision:
            # Lets the person's next submit through, now knowingly over the newer revision.
            posted = cast(QueryDict, self.data).copy()  # bound to request.POST (views)
            posted[self.add_prefix("revision")] = str(self.loop.revision)
            self.data = posted
            self.add_error(
                None,
                f"{self.loop.loop_id} was changed since this page was opened: it is at revision "
                f"{self.loop.revision} now. Check the values below (they are yours) and save again to apply them.",
            )
            return None
        patch = self.patch()
        if not patch:
            return self.loop
        error: ApiError
        try:
            data = LoopPatchIn.model_validate(patch)
            return edit.loop_edit_from(self.loop.loop_id, data, actor=self.actor, now=now)
        except ValidationError as exc:
            error = invalid_input_from(exc.errors())
        except ApiError as exc:
            error = exc
        except HostError as exc:  # the host was asked (the creator's workspace) and did not answer
            error = host_unavailable(exc)
        self.add_error(self.field_for(error.field), error.message)
        return None
