"""dashboard.pages.notes: notes on the session page, added, edited and deleted through services.notes."""

import pytest
from django.test import Client
from django.utils.html import escape

from sessions_app import services
from sessions_app.models import AuditEntry, Note, Role, ToolPolicy
from sessions_app.selectors import access
from tests.access import member
from tests.dashboard.pages.test_ledger import CRASH, panel
from tests.sessions_app.services.test_recovery import store

pytestmark = pytest.mark.django_db


def login(django_user_model, name: str, role: str) -> Client:
    user = django_user_model.objects.create_user(name)
    member(user, role)
    client = Client()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def people(django_user_model, db):
    ToolPolicy.objects.create(pattern="charge_*", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    store(CRASH, session_id="crashed")
    return {role: login(django_user_model, role, role) for role in (Role.VIEWER, Role.MEMBER, Role.ADMIN)}


def page(client) -> str:
    response = client.get("/sessions/crashed/")
    assert response.status_code == 200
    return response.content.decode()


def card(html: str, call_id: str) -> str:
    start = html.index(f'data-call-id="{call_id}"')
    return html[start:].split("</article>")[0]


def test_viewers_see_notes_but_no_form(people):
    services.add_note(actor=access.Actor(user=people[Role.MEMBER].user), session_id="crashed", text="checked", seq=6)
    html = page(people[Role.VIEWER])
    assert "checked" in card(html, "p1") and "Add a note" not in html and "/edit" not in html
    assert "Add a note" in card(page(people[Role.MEMBER]), "p1")


def test_a_note_on_a_calls_result_shows_on_its_card_and_in_the_ledger(people):
    client = people[Role.MEMBER]
    response = client.post("/sessions/crashed/notes", {"text": "billing says it went through", "tags": "verified, refund-confirmed", "seq": "7"})
    assert response.status_code == 302 and response.url == "/sessions/crashed/#seq-7"
    note = Note.objects.get()
    assert (note.seq, note.tags, note.author_name) == (7, ["verified", "refund-confirmed"], "member")
    p1 = card(page(client), "p1")  # seq 7 is p1's dispatch: its card shows the note
    assert "billing says it went through" in p1 and '<span class="badge tag">verified</span>' in p1
    row = panel(client, "crashed")
    assert "billing says it went through" in row[row.index('data-call="p1"') :].split("</tr>")[0]


def test_a_note_on_the_whole_session_shows_in_the_panel(people):
    client = people[Role.MEMBER]
    assert client.post("/sessions/crashed/notes", {"text": "customer called", "tags": ""}).url == "/sessions/crashed/#ledger-panel"
    notes = panel(client, "crashed").split('id="session-notes"')[1]
    assert "customer called" in notes and Note.objects.get().seq is None


def test_htmx_gets_204_and_a_refusal_in_place_storing_nothing(people):
    client = people[Role.MEMBER]
    htmx = {"HTTP_HX_REQUEST": "true"}
    assert client.post("/sessions/crashed/notes", {"text": "ok", "seq": "2"}, **htmx).status_code == 204
    refused = client.post("/sessions/crashed/notes", {"text": "  ", "seq": "2"}, **htmx)
    assert refused.status_code == 200 and 'data-field="text"' in refused.content.decode()
    plain = client.post("/sessions/crashed/notes", {"text": "ok", "tags": "Not A Tag!", "seq": "2"})
    assert plain.status_code == 422 and 'data-field="tags[0]"' in plain.content.decode()
    unknown = client.post("/sessions/crashed/notes", {"text": "ok", "seq": "99"})
    assert unknown.status_code == 422 and 'data-field="seq"' in unknown.content.decode()
    assert Note.objects.count() == 1


def test_without_javascript_the_inline_form_asks_for_its_own_page_which_posts_with_a_token(people):
    client = people[Role.MEMBER]
    html = page(client)
    assert 'method="get" action="/sessions/crashed/notes"' in html and "csrfmiddlewaretoken" not in card(html, "p1")
    own_page = client.get("/sessions/crashed/notes", {"text": "draft", "tags": "x", "seq": "6"}).content.decode()
    assert 'method="post"' in own_page and 'name="csrfmiddlewaretoken"' in own_page and ">draft</textarea>" in own_page


def test_members_change_their_own_notes_and_admins_any(people):
    mine = services.add_note(actor=access.Actor(user=people[Role.MEMBER].user), session_id="crashed", text="mine", seq=6)
    theirs = services.add_note(actor=access.Actor(user=people[Role.ADMIN].user), session_id="crashed", text="theirs", seq=6)
    member_page = page(people[Role.MEMBER])
    assert f"/notes/{mine.pk}/edit" in member_page and f"/notes/{theirs.pk}/edit" not in member_page
    admin_page = page(people[Role.ADMIN])
    assert f"/notes/{mine.pk}/edit" in admin_page and f"/notes/{theirs.pk}/edit" in admin_page
    assert people[Role.MEMBER].post(f"/notes/{theirs.pk}/edit", {"text": "no"}).status_code == 403
    assert people[Role.MEMBER].post(f"/notes/{mine.pk}/edit", {"text": "mine, checked", "tags": "verified"}).status_code == 302
    assert people[Role.ADMIN].post(f"/notes/{mine.pk}/delete").status_code == 302
    assert list(Note.objects.values_list("text", flat=True)) == ["theirs"]
    actions = list(AuditEntry.objects.filter(action__startswith="note").values_list("action", flat=True))
    assert actions.count(AuditEntry.NOTE_EDITED) == 1 and actions.count(AuditEntry.NOTE_DELETED) == 1


def test_note_text_and_tags_stay_text(people):
    hostile = '<script>alert("x")</script>'
    services.add_note(actor=access.Actor(user=people[Role.MEMBER].user), session_id="crashed", text=hostile, seq=6)
    html = page(people[Role.VIEWER])
    assert hostile not in html and escape(hostile) in html
