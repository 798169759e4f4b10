from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import path, re_path
from django.views.generic import RedirectView

import sessions_app.api.converters  # noqa: F401  (registers the session_id and seq converters)
from dashboard.pages import account, agents, calls, checks, compare, notes, prices, project_settings, projects, retention, sessions, timeline, tools, verdicts, webhooks
from sessions_app.api import app as api
from sessions_app.api import otlp
from sessions_app.metrics import exposition as metrics

urlpatterns = [
    path("", sessions.session_list, name="session_list"),
    path("sessions/<session_id:session_id>/", sessions.session_detail, name="session_detail"),
    path("sessions/<session_id:session_id>/blocks", sessions.session_blocks, name="session_blocks"),
    path("sessions/<session_id:session_id>/pages", sessions.session_turn_page, name="session_turn_page"),
    path("sessions/<session_id:session_id>/ledger", sessions.session_ledger_rows, name="session_ledger_rows"),
    path("sessions/<session_id:session_id>/events/<seq:seq>.json", sessions.event_json, name="event_json"),
    path("sessions/<session_id:session_id>/fork", sessions.fork_session, name="fork_session"),
    path("sessions/<session_id:session_id>/recovery", sessions.recovery_preview, name="recovery_preview"),
    path("sessions/<session_id:session_id>/delete", retention.delete_session, name="delete_session"),
    path("sessions/<session_id:session_id>/timeline", timeline.session_timeline, name="session_timeline"),
    path("sessions/<session_id:session_id>/lineage", sessions.session_lineage, name="session_lineage"),
    path("sessions/<session_id:session_id>/compare", compare.session_compare, name="session_compare"),
    path("sessions/<session_id:session_id>/notes", notes.add_note, name="add_note"),
    path("sessions/<session_id:session_id>/verdict", verdicts.call_verdict, name="call_verdict"),
    path("sessions/<session_id:session_id>/calls/<path:call_id>/check", checks.check_call, name="check_call"),
    path("notes/<int:note_id>/edit", notes.edit_note, name="edit_note"),
    path("notes/<int:note_id>/delete", notes.delete_note, name="delete_note"),
    path("calls/", calls.fleet_page, name="fleet_calls"),
    path("agents/", agents.agent_list, name="agent_list"),
    path("agents/agent", agents.agent_detail, name="agent_detail"),
    path("projects/", projects.project_list, name="project_list"),
    path("projects/<slug:slug>/", projects.project_members, name="project_members"),
    path("projects/<slug:slug>/invite", projects.invite_member, name="invite_member"),
    path("projects/<slug:slug>/members/<int:user_id>", projects.project_member, name="project_member"),
    path("projects/<slug:slug>/tokens", projects.project_tokens, name="project_tokens"),
    path("projects/<slug:slug>/tokens/<int:token_id>/revoke", projects.revoke_token, name="revoke_token"),
    path("projects/<slug:slug>/retention", retention.project_retention, name="project_retention"),
    path("projects/<slug:slug>/webhooks", webhooks.project_webhooks, name="project_webhooks"),
    path("projects/<slug:slug>/webhooks/<int:endpoint_id>", webhooks.project_webhook, name="project_webhook"),
    path("projects/<slug:slug>/audit", projects.project_audit, name="project_audit"),
    path("projects/<slug:slug>/tools/", tools.project_tools, name="project_tools"),
    path("projects/<slug:slug>/prices", prices.project_prices, name="project_prices"),
    path("projects/<slug:slug>/settings", project_settings.project_settings, name="project_settings"),
    # Browsers ask for /favicon.ico whatever the page links; base.html links the SVG itself.
    path("favicon.ico", RedirectView.as_view(url=static("turnlog/favicon.svg"))),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", account.account, name="account"),
    path("account/tokens/<int:token_id>/revoke", account.revoke_own_token, name="revoke_own_token"),
    path("account/password/", account.PasswordChangeView.as_view(), name="password_change"),
    path("account/set-password/<uidb64>/<token>/", account.SetPasswordView.as_view(), name="set_password"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls()),
    # Last: whatever no endpoint above serves under /api/ is a JSON 404, not an HTML page.
    re_path(r"^api/", api.not_found),
    # OTLP/HTTP (docs/internals/otlp.md): exporters post to OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. The view answers
    # other methods 405 itself; other paths under /otlp/ (metrics, logs) a 404 in OTLP's form.
    path("otlp/v1/traces", otlp.traces, name="otlp_traces"),
    re_path(r"^otlp/", otlp.not_found),
    # Prometheus scrapes (docs/guide/metrics.md): a site-level token with the metrics scope only.
    path("metrics", metrics.metrics, name="metrics"),
]

# A refused page is the site's styled page (JSON under /api/), not Django's bare 403.
handler403 = "dashboard.pages.refusals.permission_denied"
# A request Django itself finds bad (a SuspiciousOperation) reads as the site's styled 400 too.
handler400 = "dashboard.pages.refusals.bad_request_handler"
