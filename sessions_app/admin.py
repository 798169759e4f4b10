"""Read-only admin: the log is append-only, so nothing here edits or deletes."""

from django.contrib import admin

from sessions_app.models import ApiToken, Event, Session


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ["id", "agent_name", "event_count", "interrupted", "last_activity_at", "parent"]
    list_filter = ["interrupted"]
    search_fields = ["id", "agent_name"]
    date_hierarchy = "last_activity_at"
    raw_id_fields = ["parent"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["session", "seq", "type", "time", "call_id", "turn_seq", "step_seq"]
    list_filter = ["type"]
    search_fields = ["session__id", "call_id"]
    list_select_related = ["session"]
    raw_id_fields = ["session"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["prefix", "user", "created_at"]

    def has_delete_permission(self, request, obj=None):
        # Revoking a token is deleting it; only its hash is stored anyway.
        return request.user.is_superuser
