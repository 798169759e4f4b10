"""sessions_app.services.invitations: an invited person's account, membership, audit entry and one-time link."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core import mail
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from sessions_app.models import AuditEntry, Membership, Project, Role
from sessions_app.services import invitations
from tests.access import member

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    return Project.objects.create(slug="team", name="The Team")


@pytest.fixture
def alice(django_user_model, team):
    user = django_user_model.objects.create_user("alice")
    member(user, Role.ADMIN, team)
    return user


def test_invite_creates_the_account_without_a_password_the_membership_and_an_audit_entry(team, alice):
    invitation = invitations.invite(project=team, username="vera", role=Role.VIEWER, email="vera@example.com", by=alice)
    vera = get_user_model().objects.get(username="vera")
    assert invitation.user == vera and not vera.has_usable_password() and vera.email == "vera@example.com"
    assert Membership.objects.get(project=team, user=vera).role == Role.VIEWER
    entry = AuditEntry.objects.get(project=team, action=AuditEntry.MEMBER_ADDED, target="vera")
    assert entry.actor == alice and entry.detail["role"] == "viewer" and entry.detail["invited"] == "new account"
    assert entry.detail["email"] == "vera@example.com" and entry.detail["link_expires_at"].endswith("Z")
    assert invitation.uid == urlsafe_base64_encode(force_bytes(vera.pk))
    assert default_token_generator.check_token(vera, invitation.token)
    vera.set_password("a password of her own")
    vera.save()
    assert not default_token_generator.check_token(vera, invitation.token)  # used once: the link is dead


@pytest.mark.parametrize(
    "username, role, email, why",
    [
        ("alice", Role.MEMBER, "", "there already is an account named 'alice'"),
        ("ALICE", Role.MEMBER, "", "there already is an account named 'ALICE'"),  # usernames differing by case only confuse people
        ("vera smith", Role.MEMBER, "", "Enter a valid username"),
        ("v" * 151, Role.MEMBER, "", "at most 150 characters"),
        ("", Role.MEMBER, "", "cannot be blank"),
        ("vera", "owner", "", "unknown role 'owner'"),
        ("vera", Role.MEMBER, "not an address", "Enter a valid email address"),
    ],
)
def test_a_refused_invitation_stores_nothing(team, alice, username, role, email, why):
    users, entries = get_user_model().objects.count(), AuditEntry.objects.count()
    with pytest.raises(invitations.InvitationRefused, match=why):
        invitations.invite(project=team, username=username, role=role, email=email, by=alice)
    assert get_user_model().objects.count() == users and AuditEntry.objects.count() == entries
    assert Membership.objects.filter(project=team).count() == 1


def test_invite_takes_keywords_only(team, alice):
    with pytest.raises(TypeError):
        invitations.invite(team, "vera", Role.MEMBER)  # type: ignore[misc]


def test_the_link_is_emailed_only_when_an_email_server_is_configured(settings, team, alice):
    invitation = invitations.invite(project=team, username="vera", role=Role.MEMBER, email="vera@example.com", by=alice)
    settings.EMAIL_HOST = ""
    assert invitations.email_invitation(invitation=invitation, link="http://x/l", project=team, by=alice) == "no email server is configured"
    assert mail.outbox == []
    settings.EMAIL_HOST = "smtp.example.com"  # the tests' backend is Django's locmem one
    assert invitations.email_invitation(invitation=invitation, link="http://x/l", project=team, by=alice) is None
    (sent,) = mail.outbox
    assert sent.to == ["vera@example.com"] and "http://x/l" in sent.body and "alice invited you" in sent.body and "vera" in sent.body


def test_invite_stores_the_name_in_the_form_login_reads(team, alice):
    """NFKC, as Django's login form normalizes what is typed: "ｖｅｒａ" is the account "vera", and taken once it exists."""
    invitations.invite(project=team, username="ｖｅｒａ", role=Role.VIEWER, by=alice)
    assert get_user_model().objects.filter(username="vera").exists()
    with pytest.raises(invitations.InvitationRefused, match="there already is an account named 'VERA'"):
        invitations.invite(project=team, username="ＶＥＲＡ", role=Role.VIEWER, by=alice)
