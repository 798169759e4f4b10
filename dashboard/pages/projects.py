"""Project pages: the user's projects, and for a project's admins its members, tokens and audit log.

Every page reaches its project through sessions_app.selectors.access (an unknown
project, or one the user is no member of, is a 404; a member without the
admin role gets a 403 page saying so), reads through selectors and writes
through services.
"""

from __future__ import annotations

import functools
from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UsernameField
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.text import capfirst
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.pages import audit_words, refusals
from sessions_app import selectors, services
from sessions_app.lib.params import decimal_int
from sessions_app.models import AuditEntry, Role, Scope
from sessions_app.selectors import access
from sessions_app.services import invitations

TOKEN_SCOPES = [(value, label) for value, label in Scope.choices if value in access.PROJECT_SCOPES]
EXPIRY_DAYS_MAX = 3650


@login_required
@require_GET
def project_list(request):
    actor = access.actor_of(request)
    projects = list(access.projects(actor))
    counts = selectors.session_counts([p.pk for p in projects])
    roles = actor.roles()
    rows = [
        {"project": p, "role": roles[p.pk], "sessions": counts.get(p.pk, 0), "is_admin": actor.can(p.pk, access.ADMIN)}
        for p in projects
    ]
    return render(request, "projects/list.html", {"rows": rows})


def project_admin_page(view):
    """A page of a project's admins: the view gets the project instead of its slug."""

    @login_required
    @functools.wraps(view)
    def checked(request, slug: str, *args, **kwargs):
        actor = access.actor_of(request)
        try:
            project = access.project_for(actor, slug, access.ADMIN)
        except access.ProjectNotFound as missing:
            raise Http404(str(missing)) from None
        except access.Forbidden:
            return admins_only(request, slug)
        return view(request, project, *args, **kwargs)

    return checked


def members_read_admins_change(request, slug: str):
    """A project page every member reads and its admins change (GET reads, POST changes): (the actor, the project,
    whether the viewer is an admin), or the answer to give instead (the 403 page of a member who is not an admin).
    Http404 when the viewer is not a member."""
    actor = access.actor_of(request)
    try:
        project = access.project_for(actor, slug, access.ADMIN if request.method == "POST" else access.READ)
    except access.ProjectNotFound as missing:
        raise Http404(str(missing)) from None
    except access.Forbidden:
        return admins_only(request, slug)
    return actor, project, actor.can(project.pk, access.ADMIN)


def admins_only(request, slug: str):
    """The 403 page of a member who is not an admin: what they are, and whom to ask."""
    project = access.projects(access.actor_of(request)).filter(slug=slug).first()
    if project is None:  # the project was deleted since the check
        raise Http404(f"project {slug!r} does not exist or you are not a member")
    admins = [m for m in selectors.project_members(project) if m.role == Role.ADMIN]
    context = {"project": project, "role": access.actor_of(request).roles().get(project.pk), "admins": admins}
    return render(request, "projects/admins_only.html", context, status=403)


# Members


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project

    def clean_username(self):
        username = self.cleaned_data["username"]
        user = selectors.user_named(username)
        if user is None:
            raise forms.ValidationError(f"There is no user named {username!r}: invite them below, which creates their account.")
        held = selectors.project_member(self.project, user.pk)
        if held is not None:
            raise forms.ValidationError(f"{username} already is a member of this project (role: {held.role}): change their role in the list.")
        self.user = user
        return username


@project_admin_page
@require_http_methods(["GET", "POST"])
def project_members(request, project):
    """The members and their roles; POST adds one."""
    form = AddMemberForm(request.POST if request.method == "POST" else None, project=project)
    if request.method == "POST":
        if form.is_valid():
            role = form.cleaned_data["role"]
            services.set_membership(project=project, user=form.user, role=role, by=request.user)
            messages.success(request, f"Added {form.user.get_username()} with the role {role}.")
            return redirect("project_members", project.slug)
        return members_page(request, project, form, status=422)
    return members_page(request, project, form)


def members_page(request, project, form, *, status: int = 200, refusal: str = "", invite_form=None):
    context = {
        "project": project,
        "tab": "members",
        "members": selectors.project_members(project),
        "roles": Role.choices,
        "form": form,
        "invite_form": invite_form or InviteForm(),
        "email_configured": invitations.email_configured(),
        "link_hours": round(settings.PASSWORD_RESET_TIMEOUT / 3600),
        "refusal": refusal,
    }
    return render(request, "projects/members.html", context, status=status)


class InviteForm(forms.Form):
    # UsernameField reads the name in NFKC, as the login form will ("ｖｅｒａ" is "vera").
    username = UsernameField(max_length=150, strip=True, validators=[UnicodeUsernameValidator()])
    email = forms.EmailField(required=False, max_length=254)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_username(self):
        username = self.cleaned_data["username"]
        existing = selectors.user_named_alike(username)
        if existing is not None:
            raise forms.ValidationError(f"There already is an account named {existing.get_username()!r}: add them with the form above.")
        return username


@project_admin_page
@require_http_methods(["GET", "POST"])
def invite_member(request, project):
    """POST: create the person's account as a member with the chosen role, and show the link to set
    their password, once (emailed too when an email server is configured). GET: the members page."""
    if request.method != "POST":
        return redirect("project_members", project.slug)
    form = InviteForm(request.POST)
    if not form.is_valid():
        return members_page(request, project, AddMemberForm(project=project), status=422, invite_form=form)
    data = form.cleaned_data
    try:
        invitation = invitations.invite(project=project, username=data["username"], role=data["role"], email=data["email"], by=request.user)
    except invitations.InvitationRefused as refused:  # taken since the form was checked
        form.add_error("username", f"{capfirst(str(refused))}.")
        return members_page(request, project, AddMemberForm(project=project), status=409, invite_form=form)
    link = request.build_absolute_uri(reverse("set_password", args=[invitation.uid, invitation.token]))
    not_emailed = invitations.email_invitation(invitation=invitation, link=link, project=project, by=request.user) if data["email"] else None
    context = {"project": project, "tab": "members", "invitation": invitation, "link": link, "emailed": data["email"] and not_emailed is None,
               "not_emailed": not_emailed}  # fmt: skip
    response = render(request, "projects/invited.html", context)
    add_never_cache_headers(response)  # the only copy of the link: no cache keeps it
    return response


@project_admin_page
@require_POST
def project_member(request, project, user_id: int):
    """One member's row: `action` change (to `role`) or remove."""
    membership = selectors.project_member(project, user_id)
    if membership is None:
        raise Http404(f"user {user_id} is not a member of {project.slug}")
    action, role = request.POST.get("action"), request.POST.get("role")
    if action == "remove":
        role = None
    elif action != "change" or role not in Role.values:
        detail = f"unknown role {role!r}: one of {', '.join(Role.values)}" if action == "change" else f"unknown action {action!r}: change or remove"
        return members_page(request, project, AddMemberForm(project=project), status=422, refusal=f"Nothing changed: {detail}.")
    username = membership.user.get_username()
    try:
        services.set_membership(project=project, user=membership.user, role=role, by=request.user)
    except services.LastAdmin as refused:
        return members_page(request, project, AddMemberForm(project=project), status=409, refusal=f"Nothing changed: {refused}.")
    if role is None:
        messages.success(request, f"Removed {username} from {project.slug}.")
    elif role == membership.role:
        messages.info(request, f"{username}'s role already is {role}.")
    else:
        messages.success(request, f"{username}'s role is now {role} (was {membership.role}).")
    # Someone who just gave up their own admin role can no longer see this page.
    if not access.Actor(user=request.user).can(project.pk, access.ADMIN):
        return redirect("project_list")
    return redirect("project_members", project.slug)


# Tokens


class TokenForm(forms.Form):
    owner = forms.TypedChoiceField(coerce=int)
    name = forms.CharField(max_length=100, required=False, strip=True)
    scopes = forms.MultipleChoiceField(choices=TOKEN_SCOPES)
    expires_in_days = forms.IntegerField(min_value=1, max_value=EXPIRY_DAYS_MAX, required=False)

    def __init__(self, *args, owners: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.owners = owners  # user id -> (user, role)
        self.fields["owner"].choices = [(pk, user.get_username()) for pk, (user, _) in owners.items()]

    def clean(self):
        cleaned = super().clean()
        owner, scopes = cleaned.get("owner"), cleaned.get("scopes")
        if owner is not None and scopes:
            user, role = self.owners[owner]
            refused = sorted(set(scopes) - access.role_scopes(role))
            if refused:
                self.add_error("scopes", f"{user.get_username()}'s role is {role}, whose tokens may not have {', '.join(refused)}.")
        return cleaned


def token_owners(request, project) -> dict:
    """Who a token can be made for: the project's members, and the admin themselves (a superuser may be no member)."""
    owners = {m.user_id: (m.user, m.role) for m in selectors.project_members(project)}
    owners.setdefault(request.user.pk, (request.user, access.actor_of(request).roles()[project.pk]))
    return owners


@project_admin_page
@require_http_methods(["GET", "POST"])
def project_tokens(request, project):
    """The tokens and the form for a new one; POST creates it and shows its secret, once.

    GET ?owner= re-renders the form for that owner (the scopes their role allows), for htmx.
    """
    owners = token_owners(request, project)
    if request.method != "POST":
        return tokens_page(request, project, TokenForm(owners=owners), owner=request.GET.get("owner"))
    form = TokenForm(request.POST, owners=owners)
    if not form.is_valid():
        return tokens_page(request, project, form, status=422)
    days = form.cleaned_data["expires_in_days"]
    owner = owners[form.cleaned_data["owner"]][0]
    try:
        token, secret = services.issue_token(
            user=owner,
            project=project,
            scopes=form.cleaned_data["scopes"],
            name=form.cleaned_data["name"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
            created_by=request.user,
        )
    except services.InvalidScopes as refused:  # the owner's role changed since the form was shown
        form.add_error("scopes", str(refused))
        return tokens_page(request, project, form, status=422)
    response = render(request, "projects/token_created.html", {"project": project, "tab": "tokens", "token": token, "secret": secret})
    add_never_cache_headers(response)  # the only copy of the secret: no cache keeps it
    return response


def tokens_page(request, project, form, *, owner: str | None = None, status: int = 200):
    """The page; the form shows `owner` (an id: the one posted, or asked for), else the admin themselves."""
    owner_pk = decimal_int(form.data.get("owner", "") if form.is_bound else owner or "", name="owner")
    owner_pk = owner_pk if owner_pk in form.owners else request.user.pk
    owner_role = form.owners[owner_pk][1]
    checked = form.data.getlist("scopes") if form.is_bound else [Scope.READ]
    context = {
        "project": project,
        "tab": "tokens",
        "tokens": selectors.project_tokens(project),
        "form": form,
        "owner_pk": owner_pk,
        "owner_role": owner_role,
        "scope_choices": [
            {"value": value, "label": label, "allowed": value in access.role_scopes(owner_role), "checked": value in checked}
            for value, label in TOKEN_SCOPES
        ],
        "expiry_max": EXPIRY_DAYS_MAX,
    }
    template = "projects/tokens.html#token-form" if request.htmx.target == "token-form" else "projects/tokens.html"
    return render(request, template, context, status=status)


@project_admin_page
@require_http_methods(["GET", "POST"])
def revoke_token(request, project, token_id: int):
    """GET: what revoking this token means, and the button; POST: revoke it."""
    token = selectors.project_token(project, token_id)
    if token is None:
        raise Http404(f"no token {token_id} in {project.slug}")
    if request.method != "POST":
        return render(request, "projects/revoke_token.html", {"project": project, "tab": "tokens", "token": token})
    if services.revoke_token(token=token, by=request.user):
        messages.success(request, f"Revoked {token.prefix}…{' (' + token.name + ')' if token.name else ''}: it no longer authenticates.")
    else:
        messages.info(request, f"{token.prefix}… was already revoked.")
    return redirect("project_tokens", project.slug)


# Audit log


@project_admin_page
@require_GET
def project_audit(request, project):
    action = request.GET.get("action") or None
    if action is not None and action not in dict(AuditEntry.ACTIONS):
        return refusals.bad_request(request, parameter="action", detail=f"{action!r} is not one of {', '.join(dict(AuditEntry.ACTIONS))}")
    try:
        page = selectors.audit_entries(project, action=action, before=request.GET.get("cursor") or None)
    except selectors.InvalidCursor as exc:
        return refusals.bad_request(request, parameter="cursor", detail=str(exc))
    context = {"project": project, "tab": "audit", "entries": audit_words.audit_rows(project, page.items), "page": page, "action": action, "actions": AuditEntry.ACTIONS}
    return render(request, "projects/audit.html", context)

