"""Admin for the embedded host's registry: session headers, presets, inboxes (contract §8).

Writes go through sessions_app.services (session_upsert keeps at most one global interface;
preset_upsert); there is no delete service, so nothing is deleted here: a preset is retired by
making it unmountable, a session by the host that owns it."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from core.admin import ReadOnlyAdmin
from core.errors import ApiError
from core.validation import check_identifier

from . import services
from .models import InboxMessage, Preset, SessionHeader
from .schemas import SessionId
from .titles import fold_title

_HEADER_FIELDS = ["user_title", "generated_title", "first_prompt", "status", "preset", "model", "global_interface"]


class SessionHeaderForm(forms.ModelForm):
    class Meta:
        model = SessionHeader
        fields = ["session_id", *_HEADER_FIELDS]

    def clean_session_id(self):
        # The same check as PUT /api/host/sessions/{id}: no reserved self/new/global (spec §9).
        value = self.cleaned_data["session_id"]
        try:
            return check_identifier(value, field="session_id", kind=SessionId)
        except ApiError as error:
            raise forms.ValidationError(error.message) from error

    def _get_validation_exclusions(self):
        # session_upsert *moves* the one global-interface flag (contract §5); the model's
        # one_global_interface constraint would refuse that here, before the service runs.
        return {*super()._get_validation_exclusions(), "global_interface"}


@admin.register(SessionHeader)
class SessionHeaderAdmin(admin.ModelAdmin):
    form = SessionHeaderForm
    list_display = ["session_id", "title", "status", "global_interface", "preset", "model", "updated_at", "loops"]
    list_filter = ["status", "global_interface", "preset"]
    search_fields = ["session_id", "user_title", "generated_title", "first_prompt"]
    ordering = ["-updated_at"]
    list_per_page = 100
    readonly_fields = ["title", "updated_at", "created_for", "loops"]
    fields = ["session_id", "title", *_HEADER_FIELDS, "updated_at", "created_for", "loops"]

    def get_readonly_fields(self, request, obj=None):
        # The ID is the primary key: fixed once the session exists.
        return [*self.readonly_fields, "session_id"] if obj else self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        changes = {name: form.cleaned_data[name] for name in _HEADER_FIELDS if name in form.cleaned_data}
        saved = services.session_upsert(session_id=obj.session_id, changes=changes)
        obj.updated_at = saved.updated_at

    @admin.display(description="Title")
    def title(self, obj):
        # spec §7 fold; without a title the ID is what people see.
        return (
            fold_title(user_title=obj.user_title, generated_title=obj.generated_title, first_prompt=obj.first_prompt)
            or "—"
        )

    @admin.display(description="Loops")
    def loops(self, obj):
        url = reverse("panel:index") + "?" + urlencode({"session": obj.session_id})
        return format_html('<a href="{}">Loops targeting it</a>', url)


@admin.register(Preset)
class PresetAdmin(admin.ModelAdmin):
    list_display = ["name", "mountable"]
    list_filter = ["mountable"]
    search_fields = ["name"]

    def get_readonly_fields(self, request, obj=None):
        return ["name"] if obj else []

    def has_delete_permission(self, request, obj=None):
        return False  # retire a preset by making it unmountable: loops may still name it

    def save_model(self, request, obj, form, change):
        services.preset_upsert(name=obj.name, mountable=obj.mountable)


@admin.register(InboxMessage)
class InboxMessageAdmin(ReadOnlyAdmin):
    """What each session received (the embedded host's inbox): read-only."""

    list_display = ["message_id", "session_id", "delivery", "created_at", "occurrence_key"]
    list_filter = ["delivery"]
    search_fields = ["=session_id", "=message_id", "occurrence_key"]
    date_hierarchy = "created_at"
    ordering = ["-created_at"]
    show_full_result_count = False
