"""Admin: logs are read-only here; tool policies are the one thing people edit."""

from django.contrib import admin, messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import format_html

from sessions_app import selectors
from sessions_app.models import ApiToken, Event, RecoveryRecord, Session, ToolPolicy


class StaffMayView:
    """Every active staff user may read these pages, with no model permission: operators need them."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class RecoveryRecordInline(admin.TabularInline):
    model = RecoveryRecord
    fields = ["created_at", "kind", "username", "first_seq", "last_seq", "note", "digest"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


class StatusFilter(admin.SimpleListFilter):
    """The statuses of the session list and the API, by the same rule (selectors.status_filter)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [(status, status) for status in selectors.STATUSES]

    def queryset(self, request, queryset):
        return queryset.filter(selectors.status_filter(self.value())) if self.value() in selectors.STATUSES else queryset


@admin.register(Session)
class SessionAdmin(StaffMayView, ReadOnlyAdmin):
    list_display = ["id", "agent_name", "status", "event_count", "open_turns_display", "last_activity_at", "parent"]
    list_filter = [StatusFilter, "interrupted"]
    search_fields = ["id", "agent_name"]
    date_hierarchy = "last_activity_at"
    raw_id_fields = ["parent"]
    inlines = [RecoveryRecordInline]
    actions = ["preview_recovery"]

    @admin.display(description="open turns")
    def open_turns_display(self, session):
        return "; ".join(session.open_turn_labels) or "—"

    @admin.action(description="Preview recovery of the selected sessions")
    def preview_recovery(self, request, queryset):
        """Like the delete confirmation: an intermediate page, here the recovery preview itself."""
        sessions = list(queryset.order_by("-last_activity_at"))
        if len(sessions) == 1:
            return redirect("recovery_preview", sessions[0].id)
        interrupted = [s for s in sessions if s.interrupted]
        if not interrupted:
            self.message_user(request, "None of the selected sessions has an open turn.", messages.INFO)
            return None
        selectors.label_open_turns(interrupted)  # one query for the page, not one per session
        context = {**self.admin_site.each_context(request), "sessions": interrupted, "title": "Preview recovery", "opts": self.model._meta}
        return render(request, "admin/sessions_app/session/preview_recovery.html", context)

    def view_on_site(self, session):
        return reverse("session_detail", args=[session.id])


@admin.register(Event)
class EventAdmin(StaffMayView, ReadOnlyAdmin):
    list_display = ["session", "seq", "type", "time", "call_id", "turn_seq", "step_seq"]
    ordering = ["session", "seq"]
    list_filter = ["type"]
    search_fields = ["session__id", "call_id"]
    list_select_related = ["session"]
    raw_id_fields = ["session"]


@admin.register(RecoveryRecord)
class RecoveryRecordAdmin(StaffMayView, ReadOnlyAdmin):
    list_display = ["session", "kind", "username", "created_at", "appended", "note"]
    list_filter = ["kind"]
    search_fields = ["session__id", "username", "note"]

    @admin.display(description="seqs appended")
    def appended(self, record):
        url = reverse("session_detail", args=[record.session_id])
        return format_html('<a href="{}?highlight={}-{}#seq-{}">{}–{}</a>', url, record.first_seq, record.last_seq, record.first_seq, record.first_seq, record.last_seq)


@admin.register(ToolPolicy)
class ToolPolicyAdmin(StaffMayView, admin.ModelAdmin):
    """Editing needs the toolpolicy model permissions (superusers, and operators made by `create_token --staff`)."""

    list_display = ["pattern", "side_effect", "note"]
    list_editable = ["side_effect"]
    list_filter = ["side_effect"]
    search_fields = ["pattern", "note"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Not StaffMayView: who holds which credentials is for superusers (or a view_apitoken grant)."""

    list_display = ["prefix", "user", "created_at"]

    def has_delete_permission(self, request, obj=None):
        # Revoking a token is deleting it; only its hash is stored anyway.
        return request.user.is_superuser
