"""A person's own account: their projects and roles, their API tokens (revoke them), their password;
and the page an invitation's link opens to set the first password.

Revoking goes through services.revoke_token, as on a project's tokens page: the API
refuses the token at once and streams opened with it close within seconds.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.http import require_GET, require_http_methods

from sessions_app import selectors, services
from sessions_app.selectors import access


@login_required
@require_GET
def account(request):
    actor = access.actor_of(request)
    roles = actor.roles()
    projects = [{"project": p, "role": roles[p.pk], "is_admin": actor.can(p.pk, access.ADMIN)} for p in access.projects(actor)]
    return render(request, "account/account.html", {"projects": projects, "tokens": selectors.user_tokens(request.user)})


@login_required
@require_http_methods(["GET", "POST"])
def revoke_own_token(request, token_id: int):
    """GET: what revoking this token of yours means, and the button; POST: revoke it. Anyone else's token is a 404."""
    token = selectors.user_token(request.user, token_id)
    if token is None:
        raise Http404(f"you have no token {token_id}")
    if request.method != "POST":
        return render(request, "account/revoke_token.html", {"token": token})
    if services.revoke_token(token=token, by=request.user):
        messages.success(request, f"Revoked {token.prefix}…{' (' + token.name + ')' if token.name else ''}: it no longer authenticates.")
    else:
        messages.info(request, f"{token.prefix}… was already revoked.")
    return redirect("account")


class PasswordChangeView(auth_views.PasswordChangeView):
    """Django's (it keeps this login session valid: update_session_auth_hash), back to the account page."""

    template_name = "account/password_change.html"
    success_url = reverse_lazy("account")

    def form_valid(self, form):
        messages.success(self.request, "Your password is changed.")
        return super().form_valid(form)


class SetPasswordView(auth_views.PasswordResetConfirmView):
    """An invitation's link: the invited person sets their password, once, then logs in.

    A link that expired, was used already (the password it was made for is gone)
    or is mistyped answers 410 with a page that says so and whom to ask.
    """

    template_name = "account/set_password.html"
    success_url = reverse_lazy("login")

    def dispatch(self, *args, **kwargs):
        response = super().dispatch(*args, **kwargs)
        if not self.validlink and response.status_code == 200:  # (a good link first redirects to the form's address)
            response.status_code = 410
        return response

    def form_valid(self, form):
        messages.success(self.request, f"Your password is set: log in as {form.user.get_username()}.")
        return super().form_valid(form)
