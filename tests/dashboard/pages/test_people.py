"""People in the product, through Django's test client: project admins invite a person (account,
membership, a one-time set-password link); a person's own account page (tokens, password);
and refusals of pages as the site's styled pages, never Django's bare 403."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.core import mail
from django.http import HttpRequest
from django.test import Client

from sessions_app.models import ApiToken, AuditEntry, Membership, Project, Role, Session
from tests.access import member, token_for
from tests.conftest import ApiClient
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_forks import CRASHED
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


def text_of(response) -> str:
    return response.content.decode()


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def team():
    return Project.objects.create(slug="team", name="The Team")


@pytest.fixture
def admin(django_user_model, team):
    user = django_user_model.objects.create_user("alice", password=PASSWORD)
    member(user, Role.ADMIN, team)
    return user


@pytest.fixture
def as_admin(admin):
    return logged_in(admin)


def invitation_link(page: str) -> str:
    return html.unescape(re.search(r'id="invitation-link" class="secret" value="([^"]+)"', page).group(1))


def invite(client, username="vera", role=Role.VIEWER, **fields):
    return client.post("/projects/team/invite", {"username": username, "role": role, **fields})


def set_password(link: str, password: str = PASSWORD) -> tuple[Client, object]:
    """Open the link as the invited person (a client of their own) and set the password; the final response."""
    client = Client()
    opened = client.get(link, follow=True)
    assert opened.status_code == 200 and "Set your password" in text_of(opened)
    form_url = opened.redirect_chain[-1][0]  # Django moves the token out of the address before the form
    return client, client.post(form_url, {"new_password1": password, "new_password2": password}, follow=True)


def can_log_in(username: str, password: str) -> bool:
    return Client().login(request=HttpRequest(), username=username, password=password)


# Inviting


def test_an_admin_invites_a_person_who_sets_a_password_once_and_logs_in(as_admin, admin, team):
    response = invite(as_admin, "vera", Role.VIEWER)
    page = text_of(response)
    assert response.status_code == 200 and "vera is invited as viewer" in page and "only time it is shown" in page
    assert "no-store" in response["Cache-Control"]
    vera = get_user_model().objects.get(username="vera")
    assert not vera.has_usable_password() and Membership.objects.get(project=team, user=vera).role == Role.VIEWER
    entry = AuditEntry.objects.get(project=team, action=AuditEntry.MEMBER_ADDED, target="vera")
    assert (entry.actor, entry.detail["role"], entry.detail["invited"]) == (admin, "viewer", "new account")
    link = invitation_link(page)
    assert link.startswith("http://testserver/account/set-password/")
    assert re.search(r'<tr id="member-%d">.*?no password yet' % vera.pk, text_of(as_admin.get("/projects/team/")), re.S)

    _, done = set_password(link)
    assert done.redirect_chain[-1][0] == "/login/" and "Your password is set: log in as vera." in text_of(done)
    assert can_log_in("vera", PASSWORD)
    # Once used, the link is dead: a clear page, no form.
    again = Client().get(link, follow=True)
    assert again.status_code == 410 and "This link no longer works" in text_of(again) and "new_password1" not in text_of(again)
    vera.refresh_from_db()
    assert vera.check_password(PASSWORD)


def test_an_expired_link_answers_the_clear_page_and_sets_nothing(as_admin, monkeypatch, settings):
    link = invitation_link(text_of(invite(as_admin)))
    later = datetime.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT + 60)  # the generator's clock (naive local time)
    monkeypatch.setattr(PasswordResetTokenGenerator, "_now", lambda self: later)
    response = Client().get(link, follow=True)
    assert response.status_code == 410 and "has expired" in text_of(response) and "<header" in text_of(response)
    assert not get_user_model().objects.get(username="vera").has_usable_password()
    # A mistyped link reads the same.
    assert Client().get(link[:-4] + "0000/", follow=True).status_code == 410


def test_only_a_projects_admins_invite(django_user_model, team):
    colleague = django_user_model.objects.create_user("carol")
    member(colleague, Role.OPERATOR, team)
    refused = invite(logged_in(colleague))
    assert refused.status_code == 403 and "Only admins manage The Team" in text_of(refused)
    outsider = django_user_model.objects.create_user("olga")
    member(outsider, Role.ADMIN)  # an admin of another project
    assert invite(logged_in(outsider)).status_code == 404
    assert invite(Client()).status_code == 302  # to the login page
    assert not get_user_model().objects.filter(username="vera").exists()


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"username": "alice"}, "There already is an account named &#x27;alice&#x27;: add them with the form above."),
        ({"username": "Alice"}, "There already is an account named &#x27;alice&#x27;"),
        ({"username": "vera smith"}, "Enter a valid username"),
        ({"username": ""}, "This field is required."),
        ({"role": "owner"}, "Select a valid choice."),
        ({"email": "vera at home"}, "Enter a valid email address."),
    ],
)
def test_a_bad_invitation_is_a_422_naming_the_field_and_stores_nothing(as_admin, team, fields, error):
    users, entries = get_user_model().objects.count(), AuditEntry.objects.count()
    response = as_admin.post("/projects/team/invite", {"username": "vera", "role": Role.MEMBER, **fields})
    assert response.status_code == 422 and error in text_of(response) and 'aria-invalid="true"' in text_of(response)
    assert get_user_model().objects.count() == users and AuditEntry.objects.count() == entries


def test_a_name_taken_after_the_form_was_checked_is_a_409(as_admin, monkeypatch, django_user_model):
    from sessions_app import selectors

    django_user_model.objects.create_user("Vera")  # made by someone else between the form's check and the invitation
    monkeypatch.setattr(selectors, "user_named_alike", lambda username: None)
    users = django_user_model.objects.count()
    response = invite(as_admin, "vera")
    assert response.status_code == 409 and "There already is an account named &#x27;vera&#x27;." in text_of(response)
    assert django_user_model.objects.count() == users and not AuditEntry.objects.filter(target="vera").exists()


def test_adding_an_unknown_name_points_to_the_invitation(as_admin):
    page = text_of(as_admin.post("/projects/team/", {"username": "vera", "role": Role.MEMBER}))
    assert "invite them below, which creates their account" in page and "need an account first" not in page
    assert "Invite someone new" in page


def test_the_link_is_emailed_when_an_email_server_is_configured(as_admin, settings):
    settings.EMAIL_HOST = "smtp.example.com"
    page = text_of(invite(as_admin, email="vera@example.com"))
    (sent,) = mail.outbox
    assert sent.to == ["vera@example.com"] and invitation_link(page) in sent.body
    assert "It was emailed to vera@example.com too." in page


def test_without_an_email_server_the_link_is_only_shown(as_admin, settings):
    settings.EMAIL_HOST = ""
    page = text_of(invite(as_admin, email="vera@example.com"))
    assert mail.outbox == [] and "Not emailed: no email server is configured" in page and invitation_link(page)


# A person's own account


def test_a_user_changes_their_own_password_and_stays_logged_in(admin):
    client = Client()
    assert client.login(request=HttpRequest(), username="alice", password=PASSWORD)
    assert "Change your password" in text_of(client.get("/account/password/"))
    wrong = client.post("/account/password/", {"old_password": "nope", "new_password1": "a new secret phrase", "new_password2": "a new secret phrase"})
    assert wrong.status_code == 200 and "Your old password was entered incorrectly" in text_of(wrong)
    done = client.post(
        "/account/password/", {"old_password": PASSWORD, "new_password1": "a new secret phrase", "new_password2": "a new secret phrase"}, follow=True
    )
    assert done.redirect_chain[-1][0] == "/account/" and "Your password is changed." in text_of(done)
    assert client.get("/account/").status_code == 200  # this login session stays valid
    assert can_log_in("alice", "a new secret phrase") and not can_log_in("alice", PASSWORD)


def test_the_account_page_lists_only_the_users_own_tokens(admin, django_user_model, team):
    token_for(admin, Role.ADMIN, team, name="my laptop")
    other = django_user_model.objects.create_user("bob")
    token_for(other, Role.MEMBER, team, name="bobs agent")
    page = text_of(logged_in(admin).get("/account/"))
    assert "my laptop" in page and ApiToken.objects.get(name="my laptop").prefix in page
    assert "bobs agent" not in page and ApiToken.objects.get(name="bobs agent").prefix not in page
    assert "The Team" in page and "admin" in page


def test_a_user_revokes_their_own_token_and_not_anyone_elses(admin, django_user_model, team):
    mine = token_for(admin, Role.ADMIN, team, name="mine")
    bob = django_user_model.objects.create_user("bob")
    theirs = token_for(bob, Role.MEMBER, team, name="theirs")
    own, others = ApiToken.objects.get(name="mine"), ApiToken.objects.get(name="theirs")
    client = logged_in(admin)
    assert "Revoke your token" in text_of(client.get(f"/account/tokens/{own.pk}/revoke"))
    done = client.post(f"/account/tokens/{own.pk}/revoke", follow=True)
    assert done.redirect_chain[-1][0] == "/account/" and f"Revoked {own.prefix}" in text_of(done)
    assert ApiClient(mine).get("/api/v1/sessions").status_code == 401
    entry = AuditEntry.objects.get(action=AuditEntry.TOKEN_REVOKED)
    assert (entry.actor, entry.target, entry.project) == (admin, own.prefix, team)
    # Bob's token is none of alice's business here, although she administers the project (its tokens page is for that).
    assert client.get(f"/account/tokens/{others.pk}/revoke").status_code == 404
    assert client.post(f"/account/tokens/{others.pk}/revoke").status_code == 404
    assert ApiClient(theirs).get("/api/v1/sessions").status_code == 200
    assert Client().get("/account/").status_code == 302  # the account pages need a login


def test_the_header_links_the_account_page(as_admin):
    assert 'href="/account/">Account</a>' in text_of(as_admin.get("/projects/"))


# Refusals are the site's pages


@pytest.fixture
def viewer(django_user_model):
    user = django_user_model.objects.create_user("reader")
    member(user, Role.VIEWER)
    return logged_in(user)


def assert_styled_refusal(response, *words):
    page = text_of(response)
    assert response.status_code == 403 and response["Content-Type"].startswith("text/html")
    assert '<header class="topbar">' in page and "<h1>403 Forbidden</h1>" not in page
    for word in words:
        assert word in page


def test_a_viewer_refused_a_page_gets_the_styled_page_saying_why(viewer):
    store(CRASHED[:6], session_id="p")
    assert_styled_refusal(viewer.get("/sessions/p/fork", {"boundary": "4"}), "You may not do this here", "Your role may not fork sessions", "Log out reader")
    assert_styled_refusal(viewer.post("/sessions/p/fork", {"boundary": "4", "id": "by-viewer"}), "may not fork sessions")
    store(WORKED_EXAMPLE, session_id="crashed")
    assert_styled_refusal(viewer.post("/sessions/crashed/recovery", {"action": "recover"}), "may not apply recoveries")
    assert_styled_refusal(viewer.get("/projects/default/"), "Only admins manage")
    assert not Session.objects.filter(parent_id="p").exists()


def test_a_refused_admin_page_is_the_styled_page(django_user_model):
    staff = django_user_model.objects.create_user("clerk", is_staff=True)  # staff, with no model permission
    assert_styled_refusal(logged_in(staff).get("/admin/sessions_app/toolpolicy/add/"))


def test_a_failed_csrf_check_is_the_styled_page_and_changes_nothing(admin, team):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    assert_styled_refusal(client.post("/projects/team/", {"username": "alice", "role": Role.VIEWER}), "This form could not be accepted", "Nothing was done")
    assert_styled_refusal(client.post("/projects/team/invite", {"username": "vera", "role": Role.MEMBER}), "This form could not be accepted")
    assert_styled_refusal(client.post("/account/password/", {}), "This form could not be accepted")
    assert not get_user_model().objects.filter(username="vera").exists()


def test_the_api_keeps_its_json_refusals(admin, team):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    response = client.post("/api/v1/sessions", {"project": "team"}, content_type="application/json")
    assert response.status_code == 403 and response["Content-Type"].startswith("application/json")


def test_a_refusal_under_the_api_stays_json(rf):
    from django.core.exceptions import PermissionDenied

    from dashboard.pages import refusals

    response = refusals.permission_denied(rf.get("/api/v1/sessions"), PermissionDenied("not yours"))
    assert response.status_code == 403 and json.loads(response.content) == {"detail": "not yours", "error": "forbidden"}
    response = refusals.csrf_failure(rf.post("/api/v1/sessions"), reason="CSRF token missing.")
    assert response.status_code == 403 and json.loads(response.content)["error"] == "forbidden"


def test_an_invited_name_is_stored_as_the_login_form_reads_it(as_admin, team, django_user_model):
    """The login form reads a username in Unicode's NFKC form (Django's UsernameField): a name typed in
    fullwidth letters ("ｖｅｒａ") is stored as "vera", else its owner could never log in by typing it."""
    response = invite(as_admin, "ｖｅｒａ", Role.VIEWER)
    assert response.status_code == 200, text_of(response)
    assert list(django_user_model.objects.filter(username__in=["ｖｅｒａ", "vera"]).values_list("username", flat=True)) == ["vera"]
    _, done = set_password(invitation_link(text_of(response)))
    assert "log in as vera." in text_of(done)
    logged_in_page = Client().post("/login/", {"username": "ｖｅｒａ", "password": PASSWORD})
    assert logged_in_page.status_code == 302, "the name as the person typed it logs in"
    # The same name again, in either form, is taken.
    again = invite(as_admin, "ＶＥＲＡ", Role.VIEWER)
    assert again.status_code == 422 and "There already is an account named &#x27;vera&#x27;" in text_of(again)
