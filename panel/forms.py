"""The panel's create form (spec §8.2 "creation controls"), which the edit form extends (panel.edit_forms).

The forms only collect and convert (amount x unit -> seconds, radio choices -> a LoopCreateIn or a
LoopPatchIn); every rule is the service's: the input goes through the same models and the same
loop_create_from / loop_edit_from as the loop_create tool and PATCH /api/loops/{id}, and
the contract's error message comes back inline on the field it names (ApiError.field). The edit
form of a loop that targets `new` also has its workspace, permission preset and overlap (§14), and
every edit form where the loop ends (§16: ends_at, max_runs).
"""

from __future__ import annotations

import zoneinfo
from typing import cast

from django import forms
from django.conf import settings
from django.utils import timezone
from pydantic import ValidationError

from core.errors import ApiError, host_unavailable
from core.timeutil import truncate_to_ms
from core.validation import invalid_input_from
from loops.events import Actor
from loops.models import ActorKind, Loop, Overlap
from loops.schemas import LoopCreateIn
from loops.services import create
from sessions_app.hosts.base import HostError
from sessions_app.models import ReservedTarget
from timing import schedule_kinds, schedules

UNITS = [("1", "seconds"), ("60", "minutes"), ("3600", "hours"), ("86400", "days")]


def lead_in(schedule_type: type[schedules.Schedule]) -> str:
    """The words before a kind's amount: its label without the ellipsis ("Every…" -> "Every 10 minutes")."""
    return schedule_type.label.removesuffix("…")


# ApiError.field (the contract's dotted input path) -> the form field that shows the message.
FIELD_FOR_PATH = {
    "prompt": "prompt",
    "schedule": "kind",
    "schedule.kind": "kind",
    "schedule.every_seconds": "every_amount",
    "schedule.after_seconds": "after_amount",
    "schedule.expr": "cron_expr",
    "schedule.tz": "tz",
    "preset": "preset",
    "workspace": "workspace",
    "permission_preset": "permission_preset",
    "overlap": "overlap",
    "ends_at": "ends_at",
    "max_runs": "max_runs",
}
# contract §16: the end as a local date and time in the host's zone, to the second.
ENDS_AT_FORMAT = "%Y-%m-%dT%H:%M:%S"

# contract §14, as the panel says it.
OVERLAP_WORDS: dict[str, str] = {
    Overlap.ALLOW: "Start another run (allow)",
    Overlap.SKIP: "Skip while the last run is still running (skip)",
}
# The workspace menu's "type a directory" entry: never a workspace, as those are absolute paths.
OTHER_WORKSPACE = "other"
UNATTENDED_FORM_FIELDS = ("workspace", "workspace_other", "permission_preset", "overlap")


def zone_choices() -> list[tuple[str, str]]:
    # Only a menu: whether a zone is usable is decided by the service (timing.schedules.load_zone).
    names = sorted(zoneinfo.available_timezones() - {"localtime", "posixrules", "Factory"})
    return [("", f"Host time zone ({settings.TIME_ZONE})")] + [(name, name) for name in names]


def session_label(session) -> str:
    # spec §8.2: "The picker displays the returned title and uses the stable session_id when title is absent."
    label = f"{session.title} · {session.session_id}" if session.title else session.session_id
    return f"{label} ({session.status})"


class TargetRadios(forms.RadioSelect):
    """Radios of which some can be shown but not chosen (`self` while there is no global interface)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.unavailable: set[str] = set()

    def create_option(self, name, value, *args, **kwargs):
        option = super().create_option(name, value, *args, **kwargs)
        if value in self.unavailable:
            option["attrs"]["disabled"] = True
        return option


class LoopCreateForm(forms.Form):
    unattended = False  # a `new` loop's §14 fields: only the edit form of such a loop has them

    prompt = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "What should the session be told?"}),
        required=False,  # the service trims and refuses an empty prompt with the contract's message
        strip=False,
    )
    target = forms.ChoiceField(widget=TargetRadios)
    session = forms.CharField(required=False, widget=forms.Select, label="Existing session")
    preset = forms.CharField(required=False, widget=forms.Select, label="Preset")
    # Each kind's label as timing.schedules describes it, in SCHEDULE_TYPES' order.
    kind = forms.ChoiceField(
        choices=schedule_kinds.choices(), initial=schedules.Every.kind, widget=forms.RadioSelect, label="Schedule"
    )
    every_amount = forms.IntegerField(
        required=False,
        initial=10,
        label=lead_in(schedules.Every),
        widget=forms.NumberInput(attrs={"inputmode": "numeric"}),
    )
    # django-stubs type empty_value as str | None; Django returns any value as it is (the coerced int).
    every_unit = forms.TypedChoiceField(
        choices=UNITS,
        coerce=int,
        initial="60",
        label="Unit",
        required=False,
        empty_value=60,  # type: ignore[arg-type]
    )
    after_amount = forms.IntegerField(
        required=False,
        initial=30,
        label=lead_in(schedules.After),
        widget=forms.NumberInput(attrs={"inputmode": "numeric"}),
    )
    after_unit = forms.TypedChoiceField(
        choices=UNITS,
        coerce=int,
        initial="60",
        label="Unit",
        required=False,
        empty_value=60,  # type: ignore[arg-type]  # as every_unit
    )
    cron_expr = forms.CharField(
        required=False,
        label="Cron expression",
        strip=False,
        widget=forms.TextInput(
            attrs={"placeholder": "30 9 * * 1-5", "spellcheck": "false", "autocapitalize": "off", "autocomplete": "off"}
        ),
        help_text="minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly",
    )
    tz = forms.CharField(required=False, label="Time zone", widget=forms.Select)

    def __init__(
        self,
        *args,
        sessions,
        current_session: str = "",
        global_session=None,
        presets=(),
        undecodable=(),
        actor: Actor | None = None,
        **kwargs,
    ):
        """undecodable: the names of the submitted fields that were not valid UTF-8 (panel.utf8);
        actor: who creates the loop (the signed-in staff user), for its audit trail."""
        super().__init__(*args, **kwargs)
        self.actor = actor or Actor(ActorKind.USER)
        self.current_session = current_session
        self.global_session = global_session
        self.undecodable = list(undecodable)
        targets = []
        if current_session:
            title = next((s.title for s in sessions if s.session_id == current_session), None)
            targets.append(("current", f"This session — {title or current_session}"))
        global_label = "Global interface (self)"
        if global_session is not None:
            global_label += f" — {global_session.title or global_session.session_id}"
        else:
            global_label += " — unavailable"
            # Shown greyed out, not hidden: spec §8.2 lists it, and the page says why it is off. A post
            # that chooses it anyway gets the service's target_unavailable message.
            self.fields["target"].widget.unavailable = {"self"}
        targets += [
            ("self", global_label),
            ("new", "A fresh session for every run (new)"),
            ("session", "An existing session"),
        ]
        cast(forms.ChoiceField, self.fields["target"]).choices = targets
        self.fields["target"].initial = "current" if current_session else "self" if global_session else "new"
        self.fields["session"].widget.choices = [("", "Choose a session…")] + [
            (s.session_id, session_label(s)) for s in sessions
        ]
        # With no global interface a panel-made loop has no creator: `new` gets the profile default.
        inherit = "Inherit the creator's preset" if global_session is not None else "The profile default preset"
        self.fields["preset"].widget.choices = [("", inherit)] + [(p, p) for p in presets]
        self.fields["tz"].widget.choices = zone_choices()
        self.fields["tz"].widget.attrs["data-browser-zone"] = ""  # panel.js: suggest the browser's zone

    def clean(self):
        # Django has already turned such bytes into U+FFFD (or Latin-1); refuse, don't store that.
        for name in self.undecodable:
            field = name if name in self.fields else None
            if field is not None:
                self._errors.pop(field, None)  # the cause, rather than e.g. "Enter a whole number."
            what = "This field" if field else f"The form field {name!r}"
            self.add_error(field, f"{what} was not sent as valid UTF-8 text; retype it and submit again.")
        return super().clean()

    def payload(self) -> dict:
        """The loop_create input the form describes (spec §2.1), before validation."""
        data = self.cleaned_data
        kind = data.get("kind")
        schedule: dict = {"kind": kind}
        if kind in ("every", "after"):
            amount, unit = data.get(f"{kind}_amount"), data.get(f"{kind}_unit") or 1
            if amount is not None:
                schedule[f"{kind}_seconds"] = amount * unit
        elif kind == "cron":
            schedule["expr"] = data.get("cron_expr", "")
            if data.get("tz"):
                schedule["tz"] = data["tz"]
        target = data.get("target")
        body = {"prompt": data.get("prompt", ""), "schedule": schedule}
        if target == "current":
            body["session_id"] = self.current_session
        elif target == "session":
            body["session_id"] = data.get("session") or ""
        elif target in (ReservedTarget.SELF, ReservedTarget.NEW):
            body["session_id"] = target
        if target == ReservedTarget.NEW and data.get("preset"):
            body["preset"] = data["preset"]  # spec §8.2: a preset only when new is selected
        return body

    def field_for(self, path: str | None) -> str | None:
        if path == "session_id":
            return "session" if self.cleaned_data.get("target") == "session" else "target"
        return FIELD_FOR_PATH.get(path or "")

    def save(self) -> Loop | None:
        """Create the loop through the service, or put the contract's message on the right field."""
        error: ApiError
        try:
            data = LoopCreateIn.model_validate(self.payload())
            assert data.session_id is not None  # every target choice names one (payload)
            # contract §2: a loop created from the panel records the global interface session as its
            # creator (none when there is none).
            return create.loop_create_from(
                data,
                target=data.session_id,
                created_by=create.default_creator(),
                actor=self.actor,
                now=truncate_to_ms(timezone.now()),
            )
        except ValidationError as exc:
            error = invalid_input_from(exc.errors())
        except ApiError as exc:
            error = exc
        except HostError as exc:  # the host was asked (the creator's workspace) and did not answer
            error = host_unavailable(exc)
        self.add_error(self.field_for(error.field), error.message)
        return None
