"""Admin: logs are read-only here, and staff see only their projects' logs (sessions_app.selectors.access).

Site-wide tool policies are the one thing edited here by hand, by superusers (they
rank every project's recoveries; a project's admins keep its own on its Tools page). Projects, their members,
tokens, webhooks and the audit log are for superusers; a project's own admins manage
them on its project pages.
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from sessions_app import selectors, services
from sessions_app.lib.errors import InvalidPolicy
from sessions_app.models import (
    ApiToken,
    AuditEntry,
    AutoRecoveryPolicy,
    Event,
    Membership,
    Project,
    RecoveryRecord,
    Role,
    Session,
    ToolPolicy,
    WebhookEndpoint,
)
from sessions_app.selectors import access
from sessions_app.services import notify, retention, tool_policies


def is_active_superuser(request) -> bool:
    return request.user.is_active and request.user.is_superuser


class StaffMayView:
    """Every active staff user may read these pages, with no model permission: operators need them."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff


class SuperusersOnly:
    """Who holds which rights and credentials, in every project: superusers only, whatever model permissions say."""

    def has_module_permission(self, request):
        return is_active_superuser(request)

    def has_view_permission(self, request, obj=None):
        return is_active_superuser(request)


class SuperusersChange:
    """Only superusers add, change or delete these rows, whatever model permissions say."""

    def has_add_permission(self, request):
        return is_active_superuser(request)

    def has_change_permission(self, request, obj=None):
        return is_active_superuser(request)

    def has_delete_permission(self, request, obj=None):
        return is_active_superuser(request)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ProjectScoped:
    """Rows of the projects the user may read; another project's row is missing, so its page says it doesn't exist."""

    # The lookup from the model to its session's project.
    project_path = "session__project"

    def get_queryset(self, request):
        readable = access.actor_of(request).project_ids(access.READ)
        return super().get_queryset(request).filter(**{f"{self.project_path}__in": readable})


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
class SessionAdmin(StaffMayView, ProjectScoped, ReadOnlyAdmin):
    project_path = "project"
    list_display = ["id", "project", "agent_name", "status", "event_count", "open_turns_display", "last_activity_at", "parent"]
    # RelatedOnly: the filter offers the projects of rows the user sees, not every project's name.
    list_filter = [StatusFilter, "interrupted", ("project", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["project"]
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
        """Like the delete confirmation: an intermediate page, here the recovery preview itself.

        The queryset is the changelist's, so it holds only sessions the user may read.
        """
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
class EventAdmin(StaffMayView, ProjectScoped, ReadOnlyAdmin):
    list_display = ["session", "seq", "type", "time", "received_at", "call_id", "turn_seq", "step_seq"]
    ordering = ["session", "seq"]
    list_filter = ["type"]
    search_fields = ["session__id", "call_id"]
    list_select_related = ["session"]
    raw_id_fields = ["session"]


@admin.register(RecoveryRecord)
class RecoveryRecordAdmin(StaffMayView, ProjectScoped, ReadOnlyAdmin):
    list_display = ["session", "kind", "username", "created_at", "appended", "strategy", "automatic", "abandoned", "note"]
    list_filter = ["kind", "automatic", "abandoned", ("session__project", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["session__id", "agent_name", "username", "note"]

    @admin.display(description="strategies")
    def strategy(self, record):
        return ", ".join(record.strategy_names) or "—"

    @admin.display(description="seqs appended")
    def appended(self, record):
        url = reverse("session_detail", args=[record.session_id])
        return format_html('<a href="{}?highlight={}-{}#seq-{}">{}–{}</a>', url, record.first_seq, record.last_seq, record.first_seq, record.first_seq, record.last_seq)


class SiteSettingAdmin(StaffMayView, SuperusersChange, admin.ModelAdmin):
    """A setting of every project: staff read it, only superusers add, change or delete it."""


class ToolPolicyForm(forms.ModelForm):
    check_url = forms.CharField(max_length=tool_policies.CHECK_URL_MAX, required=False, label="Reconciler URL")

    class Meta:
        model = ToolPolicy
        fields = ["project", "pattern", "side_effect", "note", "receipt_pointer", "check_url"]

    def clean(self):
        """The service's own checks (an RFC 6901 pointer, an address the webhooks' rules allow) as the form's errors."""
        values = super().clean()
        for name, check in {"receipt_pointer": tool_policies.checked_pointer, "check_url": tool_policies.checked_check_url}.items():
            if name in values and name not in self.errors:
                try:
                    values[name] = check(values[name])
                except InvalidPolicy as refused:
                    self.add_error(name, refused.detail)
        return values


@admin.register(ToolPolicy)
class ToolPolicyAdmin(SiteSettingAdmin):
    """Staff read the policies (the site's, and those of the projects they may read); only superusers change them
    here, through sessions_app.services.tool_policies (checked and audited). A site-wide policy ranks the recoveries
    of every project; a project's admins keep their own on its Tools page."""

    form = ToolPolicyForm
    list_display = ["pattern", "scope_display", "side_effect", "receipt_pointer", "check_url", "note", "updated_at"]
    # RelatedOnly: the projects of the rows the user sees; its empty choice is the site-wide policies.
    list_filter = [("project", admin.RelatedOnlyFieldListFilter), "side_effect"]
    list_select_related = ["project"]
    search_fields = ["pattern", "note"]
    readonly_fields = ["check_secret", "created_at", "updated_at"]

    def get_queryset(self, request):
        readable = access.actor_of(request).project_ids(access.READ)
        return super().get_queryset(request).filter(Q(project__isnull=True) | Q(project_id__in=readable))

    def get_readonly_fields(self, request, obj=None):
        # A policy is its (project, pattern): to move or rename one, add the new one and delete the old.
        return [*(["project", "pattern"] if obj is not None else []), *self.readonly_fields]

    @admin.display(description="scope", ordering="project__slug")
    def scope_display(self, policy):
        return "site-wide" if policy.project_id is None else f"project {policy.project.slug}"

    def save_model(self, request, obj, form, change):
        values = {name: form.cleaned_data[name] for name in ("side_effect", "note", "receipt_pointer", "check_url")}
        slug = obj.project.slug if obj.project is not None else tool_policies.SITE
        saved, secret = tool_policies.save_policy(actor=access.actor_of(request), project_slug=slug, pattern=obj.pattern, **values)
        obj.pk = saved.pk
        if secret:
            self.message_user(request, "A new reconciler secret was made: it is shown on this policy's page (check secret).", messages.WARNING)

    def delete_model(self, request, obj):
        slug = obj.project.slug if obj.project_id is not None else tool_policies.SITE
        tool_policies.delete_policy(actor=access.actor_of(request), project_slug=slug, pattern=obj.pattern)

    def delete_queryset(self, request, queryset):
        for policy in queryset.select_related("project"):
            self.delete_model(request, policy)


@admin.register(AutoRecoveryPolicy)
class AutoRecoveryPolicyAdmin(SiteSettingAdmin):
    """Which agents the recovery worker recovers without a person (section 8.1): staff read, superusers edit.

    The model's clean() refuses a quiet time below the stall window, in the form.
    """

    list_display = ["agent_pattern", "enabled", "min_quiet_seconds", "max_per_hour", "note"]
    list_filter = ["enabled"]
    search_fields = ["agent_pattern", "note"]


class MembershipForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ["user", "role"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            # A row is one person's membership: to give it to someone else, remove it and add theirs.
            self.fields["user"].disabled = True


class MembershipFormSet(forms.BaseInlineFormSet):
    def clean(self):
        super().clean()
        if any(self.errors):
            return
        had_admin = any(form.instance.pk is not None and form.initial.get("role") == Role.ADMIN for form in self.forms)
        keeps_admin = any(
            form.cleaned_data.get("role") == Role.ADMIN and not self._should_delete_form(form) for form in self.forms
        )
        if had_admin and not keeps_admin:
            raise ValidationError("A project keeps at least one admin: make someone else an admin before removing or lowering the last one.")


class MembershipInline(admin.TabularInline):
    """Saved through services.set_membership (ProjectAdmin.save_formset), so every change is audited."""

    model = Membership
    form = MembershipForm
    formset = MembershipFormSet
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]
    extra = 1


@admin.register(Project)
class ProjectAdmin(SuperusersOnly, admin.ModelAdmin):
    list_display = ["slug", "name", "member_count", "session_count", "retention_days", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def save_model(self, request, obj, form, change):
        days = obj.retention_days
        if change and "retention_days" in form.changed_data:  # through retention, which audits it
            obj.retention_days = form.initial.get("retention_days")
        super().save_model(request, obj, form, change)
        if days != obj.retention_days:
            retention.set_retention(project=obj, days=days, actor=request.user)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            member_count=Count("memberships", distinct=True), session_count=Count("sessions", distinct=True)
        )

    @admin.display(description="members", ordering="member_count")
    def member_count(self, project):
        return project.member_count

    @admin.display(description="sessions", ordering="session_count")
    def session_count(self, project):
        return project.session_count

    def get_readonly_fields(self, request, obj=None):
        # The slug is how API clients, the CLI and Project.default() find a project: fixed once made.
        return ["slug", "created_at"] if obj is not None else ["created_at"]

    def has_add_permission(self, request):
        return is_active_superuser(request)

    def has_change_permission(self, request, obj=None):
        return is_active_superuser(request)

    def has_delete_permission(self, request, obj=None):
        # Its sessions and audit entries are kept (PROTECT), and deleting would drop its tokens unaudited.
        return False

    def save_formset(self, request, form, formset, change):
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        formset.save(commit=False)  # only collects what changed, for the admin's history; set_membership writes
        grants = [*formset.new_objects, *(membership for membership, _ in formset.changed_objects)]
        # Admins first, removals last, so handing the admin role over in one save never leaves the project without one.
        grants.sort(key=lambda membership: membership.role != Role.ADMIN)
        for membership in grants:
            services.set_membership(project=form.instance, user=membership.user, role=membership.role, by=request.user)
        for membership in formset.deleted_objects:
            services.set_membership(project=form.instance, user=membership.user, role=None, by=request.user)


class TokenStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("active", "active"), ("expired", "expired"), ("revoked", "revoked")]

    def queryset(self, request, queryset):
        """The rule of ApiToken.state, in SQL."""
        now = timezone.now()
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        if self.value() == "active":
            return queryset.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now), revoked_at__isnull=True)
        return queryset


@admin.register(ApiToken)
class ApiTokenAdmin(SuperusersOnly, ReadOnlyAdmin):
    """Tokens are made on the project page or with `create_token` (the secret is shown once), never here;
    revoking keeps the row, so the audit log and this list still name it."""

    list_display = ["prefix", "name", "user", "project", "scopes_display", "state", "created_at", "expires_at", "last_used_at"]
    list_filter = [TokenStateFilter, "project"]
    list_select_related = ["user", "project"]
    search_fields = ["prefix", "name", "user__username"]
    fields = ["prefix", "name", "user", "project", "scopes", "state", "created_at", "created_by", "expires_at", "last_used_at", "revoked_at"]
    readonly_fields = ["state"]
    actions = ["revoke"]

    @admin.display(description="scopes")
    def scopes_display(self, token):
        return ", ".join(token.scopes)

    def has_revoke_permission(self, request):
        return is_active_superuser(request)

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke(self, request, queryset):
        revoked = [token for token in queryset.select_related("user") if services.revoke_token(token=token, by=request.user)]
        if revoked:
            self.message_user(request, f"Revoked {len(revoked)} token(s): {', '.join(t.prefix for t in revoked)}.", messages.SUCCESS)
        else:
            self.message_user(request, "The selected tokens were already revoked.", messages.INFO)


@admin.register(AuditEntry)
class AuditEntryAdmin(SuperusersOnly, ReadOnlyAdmin):
    list_display = ["created_at", "project", "action", "actor_name", "target", "detail"]
    list_filter = ["action", "project"]
    list_select_related = ["project"]
    search_fields = ["target", "actor_name"]
    date_hierarchy = "created_at"


class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=2000, assume_scheme="https", label="URL")

    class Meta:
        model = WebhookEndpoint
        fields = ["project", "url", "agent_patterns", "kinds", "enabled", "slack"]

    def clean(self):
        """notify's own checks (a URL on a private address, no transitions, no agents) as the form's errors."""
        values = super().clean()
        if not self.errors:
            try:
                notify.endpoints.check(url=values["url"], kinds=values["kinds"], agent_patterns=values["agent_patterns"])
            except notify.EndpointRefused as refused:
                self.add_error(refused.field, refused.why)
        return values


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(SuperusersOnly, SuperusersChange, admin.ModelAdmin):
    """Every project's webhooks, for superusers; changes go through sessions_app.services.notify (checked and audited)."""

    form = WebhookEndpointForm
    list_display = ["url", "project", "agent_patterns", "kinds", "enabled", "slack", "created_at", "disabled_reason"]
    list_filter = ["enabled", "project"]
    list_select_related = ["project"]
    readonly_fields = ["secret", "created_at", "disabled_reason"]

    def save_model(self, request, obj, form, change):
        values = {name: form.cleaned_data[name] for name in ("url", "agent_patterns", "kinds", "enabled", "slack")}
        if change:
            notify.update_endpoint(endpoint=WebhookEndpoint.objects.get(pk=obj.pk), actor=request.user, **values)
        else:
            obj.pk = notify.create_endpoint(project=form.cleaned_data["project"], actor=request.user, **values).pk

    def delete_model(self, request, obj):
        notify.delete_endpoint(endpoint=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for endpoint in queryset:
            notify.delete_endpoint(endpoint=endpoint, actor=request.user)
