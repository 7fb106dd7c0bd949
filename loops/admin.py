"""Admin for the loop registry (contract §8). Writes go through the services, never the ORM:
adding a loop opens the panel's form (loops.services.create), deleting calls lifecycle.loop_delete,
the bulk Pause / Resume / Run now actions call the operators' operations (contract §9), the Overlap
actions edit `new` loops through loops.services.edit (contract §14), as does the action that sets where
loops end (contract §16, with a form of its own), and loops and runs are otherwise
read-only (spec §1: there is no update tool; edits are the panel's form)."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from core.admin import ReadOnlyAdmin
from core.errors import ApiError, UnknownLoop
from loops import humanize
from loops.events import Actor
from loops.humanize import loop_zone, preview
from loops.models import SCHEDULE_COLUMNS, FailureEpisode, Loop, LoopRun, LoopState, Overlap, SchedulerHeartbeat
from loops.presenters import loop_state
from loops.selectors import RUN_PAGE, fire_times, loop_runs
from loops.services import edit, lifecycle
from sessions_app.models import ReservedTarget


class EndsForm(forms.Form):
    """The admin's form for where loops end (contract §16); empty clears. The rules (an end in the
    future, a limit above the runs delivered) are the service's, reported per loop."""

    ends_at = forms.DateTimeField(
        required=False,
        label="Ends at",
        input_formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
    )
    max_runs = forms.IntegerField(required=False, min_value=1, label="Ends after (delivered runs)")

    def changes(self) -> dict:
        return {"ends_at": self.cleaned_data["ends_at"], "max_runs": self.cleaned_data["max_runs"]}


@admin.register(Loop)
class LoopAdmin(admin.ModelAdmin):
    list_display = [
        "loop_id",
        "name",
        "prompt_preview",
        "schedule_words",
        "target",
        "current_state",
        "next_at",
        "last_run_at",
        "last_result",
    ]
    list_filter = ["state", "kind", "last_result", "overlap"]
    search_fields = ["loop_id", "name", "prompt", "session_id", "created_by_session_id"]
    ordering = ["next_at", "created_at"]
    date_hierarchy = "created_at"
    list_per_page = 50
    show_full_result_count = False  # the count query on a large registry is not worth it per page
    actions = [
        "pause_selected",
        "resume_selected",
        "run_now_selected",
        "overlap_skip_selected",
        "overlap_allow_selected",
        "set_ends_selected",
        "delete_through_service",
    ]
    fieldsets = [
        (None, {"fields": ["loop_id", "name", "prompt", "current_state", "revision", "panel_link"]}),
        ("Paused", {"fields": ["paused_at", "pause_reason", "consecutive_failures"]}),
        ("Schedule", {"fields": ["schedule_words", *SCHEDULE_COLUMNS, "upcoming"]}),
        ("Target", {"fields": ["session_id", "preset", "created_by_session_id", "created_at"]}),
        (
            "Unattended runs",
            {
                "fields": ["workspace", "permission_preset", "overlap"],
                "description": 'Only for loops that target "new" (contract §14): where each fresh session starts '
                "(empty: the host default, DSHLOOP_DSH_CWD), the permission preset it runs under (empty: the "
                "host's own), and whether an occurrence starts while the last run is still running.",
            },
        ),
        (
            "Ends",
            {
                "fields": ["ends_at", "max_runs", "runs_delivered"],
                "description": "Where the loop ends (contract §16): its last run is the last due at or before "
                "ends_at; after max_runs delivered runs it ends. Set them with the action “Set where selected "
                "loops end…” or on the panel's edit form.",
            },
        ),
        ("Last run", {"fields": ["next_at", "last_run_at", "last_result", "last_error", "v1_id"]}),
        ("Run history", {"fields": ["run_history"]}),
    ]
    readonly_fields = ["current_state", "schedule_words", "panel_link", "upcoming", "run_history"]

    def has_add_permission(self, request):
        return True  # add_view sends the user to the panel's form, which calls loops.services.create

    def has_change_permission(self, request, obj=None):
        return False  # no update tool (spec §1): the change page is a read-only view

    def add_view(self, request, form_url="", extra_context=None):
        return redirect("panel:create")

    def delete_model(self, request, obj):
        lifecycle.loop_delete(loop_id=obj.loop_id, actor=Actor.user(request.user))

    def response_delete(self, request, obj_display, obj_id):
        response = super().response_delete(request, obj_display, obj_id)
        # Without change permission Django would go to the admin index; the list is viewable.
        response["Location"] = reverse("admin:loops_loop_changelist")
        return response

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # a bulk ORM delete would bypass the service
        return actions

    # contract §9: the bulk actions call the same operations as the panel and the REST API, one loop
    # at a time (each is its own transaction, ordered with the scheduler's claim of that loop), so
    # one refusal never undoes the others; the refusals are reported per loop.

    def has_operate_permission(self, request) -> bool:
        # The model's change permission: the change page stays read-only (has_change_permission),
        # but whoever may change loops may pause, resume and run them.
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    def _operate(self, request, queryset, operation, *, done: str, skip=None):
        """Call `operation` for each selected loop; `skip(loop)` (its loop_id, state, session_id and
        overlap) says why there is nothing to do for one, or None. Pause and resume are idempotent,
        so skipping only keeps the count and the audit trail honest."""
        actor = Actor.user(request.user)
        count, refused = 0, []
        passed: dict[str, list[str]] = {}  # why nothing was done -> those loops
        rows = queryset.order_by("loop_id").values_list("loop_id", "state", "session_id", "overlap", named=True)
        for row in rows:
            loop_id = row.loop_id
            reason = skip(row) if skip is not None else None
            if reason:
                passed.setdefault(reason, []).append(loop_id)
                continue
            try:
                operation(loop_id=loop_id, actor=actor)
            except UnknownLoop:
                refused.append(f"{loop_id} was deleted meanwhile.")
            except ApiError as exc:
                refused.append(exc.message)  # e.g. 409 run_in_flight: "loop_… has a run in flight; …"
            else:
                count += 1
        text = f"{done} {count} loop{'s' if count != 1 else ''}."
        for reason, ids in passed.items():
            text += f" {len(ids)} {'was' if len(ids) == 1 else 'were'} {reason}: {', '.join(ids)}."
        self.message_user(request, text, messages.SUCCESS if count or not refused else messages.WARNING)
        if refused:
            items = format_html_join("", "<li>{}</li>", ((reason,) for reason in refused))
            self.message_user(request, format_html("Refused {}: <ul>{}</ul>", len(refused), items), messages.ERROR)

    @admin.action(description="Pause selected loops", permissions=["operate"])
    def pause_selected(self, request, queryset):
        self._operate(
            request,
            queryset,
            lifecycle.loop_pause,
            done="Paused",
            skip=lambda loop: "already paused" if loop.state == LoopState.PAUSED else None,
        )

    @admin.action(description="Resume selected loops", permissions=["operate"])
    def resume_selected(self, request, queryset):
        self._operate(
            request,
            queryset,
            lifecycle.loop_resume,
            done="Resumed",
            skip=lambda loop: "not paused" if loop.state != LoopState.PAUSED else None,
        )

    @admin.action(description="Run selected loops now (one manual run each)", permissions=["operate"])
    def run_now_selected(self, request, queryset):
        self._operate(request, queryset, lifecycle.loop_run_now, done="Queued a manual run of")

    def _set_overlap(self, request, queryset, overlap: Overlap):
        def set_overlap(*, loop_id: str, actor: Actor):
            # An edit like the panel's and PATCH's: a revision and an `edited` event (contract §14).
            edit.loop_edit(loop_id=loop_id, changes={"overlap": overlap}, actor=actor)

        def skip(loop) -> str | None:
            if loop.session_id != ReservedTarget.NEW:
                return 'left alone (overlap is only for loops that target "new")'
            return f"already set to {overlap}" if loop.overlap == overlap else None

        self._operate(request, queryset, set_overlap, done=f"Set overlap to {overlap} on", skip=skip)

    @admin.action(description="Overlap: skip while running", permissions=["operate"])
    def overlap_skip_selected(self, request, queryset):
        self._set_overlap(request, queryset, Overlap.SKIP)

    @admin.action(description="Overlap: allow", permissions=["operate"])
    def overlap_allow_selected(self, request, queryset):
        self._set_overlap(request, queryset, Overlap.ALLOW)

    @admin.action(description="Set where selected loops end…", permissions=["operate"])
    def set_ends_selected(self, request, queryset):
        """contract §16: a form for ends_at and max_runs (empty clears), then an edit of each loop
        through loops.services.edit; a loop that refuses (a bound it has passed, completed) is reported."""
        form = EndsForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            changes = form.changes()

            def set_ends(*, loop_id: str, actor: Actor):
                edit.loop_edit(loop_id=loop_id, changes=changes, actor=actor)

            self._operate(request, queryset, set_ends, done="Set where it ends on")
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Set where the selected loops end",
            "opts": self.opts,
            "form": form,
            "loops": queryset.order_by("loop_id"),
            "action": "set_ends_selected",
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "host_zone": settings.TIME_ZONE,
        }
        return TemplateResponse(request, "admin/loops/loop/set_ends.html", context)

    @admin.action(description="Delete selected loops (run history stays)", permissions=["delete"])
    def delete_through_service(self, request, queryset):
        deleted = 0
        for loop_id in queryset.values_list("loop_id", flat=True):
            try:
                lifecycle.loop_delete(loop_id=loop_id, actor=Actor.user(request.user))
                deleted += 1
            except UnknownLoop:
                pass  # deleted meanwhile: that is what was asked for
        self.message_user(request, f"Deleted {deleted} loop{'s' if deleted != 1 else ''}.", messages.SUCCESS)

    @admin.display(description="Prompt")
    def prompt_preview(self, obj):
        return preview(obj.prompt, 80)

    @admin.display(description="Schedule")
    def schedule_words(self, obj):
        words, exact = humanize.schedule_words(obj, now=timezone.now(), host_tz=settings.TIME_ZONE)
        return format_html('<span title="{}">{}</span>', exact, words)

    @admin.display(description="Target", ordering="session_id")
    def target(self, obj):
        if obj.session_id == ReservedTarget.NEW and obj.preset:
            return format_html("new <small>(preset {})</small>", obj.preset)
        return obj.session_id

    @admin.display(description="State", ordering="state")
    def current_state(self, obj):
        return loop_state(obj, timezone.now())  # spec §4: overdue is derived, never stored

    @admin.display(description="Panel")
    def panel_link(self, obj):
        return format_html('<a href="{}">Open in the panel</a>', reverse("panel:detail", args=[obj.loop_id]))

    @admin.display(description="Next fire times")
    def upcoming(self, obj):
        zone_name = loop_zone(obj)
        times = fire_times(obj, now=timezone.now(), count=5)
        if not times:
            return "—"
        return format_html(
            "<ol>{}</ol>",
            format_html_join("", "<li>{}</li>", ((humanize.full_local_time(t, zone_name),) for t in times)),
        )

    @admin.display(description="Runs (newest first)")
    def run_history(self, obj):
        # LoopRun has no foreign key (runs outlive their loop), so no InlineModelAdmin: a read-only
        # table of the same selector GET /api/loops/{id}/runs uses.
        try:
            runs = list(loop_runs(obj.loop_id, limit=RUN_PAGE))
        except UnknownLoop:
            runs = []
        if not runs:
            return "No runs yet."
        zone_name = loop_zone(obj)
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    reverse("admin:loops_looprun_change", args=[quote(run.run_id)]),  # admin URLs quote "_"
                    humanize.full_local_time(run.scheduled_at, zone_name),
                    run.status,
                    f"r{run.revision}" + (" (manual)" if run.manual else ""),
                    run.target_session_id or "—",
                    run.missed,
                    run.error or "—",
                    run.fallback or "—",
                )
                for run in runs
            ),
        )
        all_runs = reverse("admin:loops_looprun_changelist") + "?" + urlencode({"loop_id": obj.loop_id})
        return format_html(
            "<table><thead><tr><th>Scheduled</th><th>Status</th><th>Revision</th><th>Target session</th><th>Missed</th>"
            "<th>Error</th><th>Fallback</th></tr></thead><tbody>{}</tbody></table>"
            '<p><a href="{}">All runs of this loop</a></p>',
            rows,
            all_runs,
        )


@admin.register(LoopRun)
class LoopRunAdmin(ReadOnlyAdmin):
    list_display = [
        "occurrence_key",
        "loop_link",
        "scheduled_at",
        "status",
        "outcome",
        "revision",
        "manual",
        "attempt",
        "missed",
        "target_session_id",
        "error_preview",
        "fallback",
    ]
    list_filter = ["status", "outcome", "manual"]
    search_fields = ["=loop_id", "=run_id", "occurrence_key", "target_session_id", "error"]
    date_hierarchy = "scheduled_at"
    list_per_page = 100
    show_full_result_count = False
    readonly_fields = ["loop_link"]

    @admin.display(description="Loop", ordering="loop_id")
    def loop_link(self, obj):
        # No foreign key: the loop may be gone, its runs stay (contract §4).
        return format_html('<a href="{}">{}</a>', reverse("panel:detail", args=[obj.loop_id]), obj.loop_id)

    @admin.display(description="Error")
    def error_preview(self, obj):
        return preview(obj.error, 80) if obj.error else "—"


@admin.register(SchedulerHeartbeat)
class SchedulerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["instance_id", "hostname", "pid", "started_at", "last_tick_at"]
    ordering = ["-last_tick_at"]


@admin.register(FailureEpisode)
class FailureEpisodeAdmin(ReadOnlyAdmin):
    """contract §16: each failure episode, and what became of its notice and its webhook event."""

    list_display = [
        "key",
        "event",
        "at",
        "consecutive_failures",
        "notice_status",
        "notice_session_id",
        "webhook_status",
        "webhook_attempts",
        "error_preview",
    ]
    list_filter = ["event", "notice_status", "webhook_status"]
    search_fields = ["=loop_id", "=run_id", "notice_session_id"]
    date_hierarchy = "at"
    ordering = ["-at"]
    list_per_page = 100
    show_full_result_count = False

    @admin.display(description="Error")
    def error_preview(self, obj):
        return preview(obj.error, 80) if obj.error else "—"
