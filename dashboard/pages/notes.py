"""Notes on the session page: who sees which controls, and the forms that add, edit and delete notes.

Every write goes through sessions_app.services.notes (which checks access and
publishes the change on commit, so every open page of the session follows it
live). A form posted with htmx is answered 204 (the live frame re-renders
the notes) or, when refused, the form again with the reason (200: htmx swaps
only 2xx answers); without JavaScript the answer is a redirect back to the
note's place, or the form's own page with the reason and a 422.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from sessions_app import services
from sessions_app.lib import errors
from sessions_app.lib.params import decimal_int
from sessions_app.models import Note
from sessions_app.selectors import access


@dataclass(frozen=True)
class NoteRights:
    """What a page shows one person of the notes of one project's session: a form to add, controls to change."""

    can_add: bool  # APPEND: members, operators, admins
    admin: bool
    user_id: int | None
    # RECOVER (operators, admins): a card's verdict forms. Kept here as every page and frame passes these rights along.
    can_settle: bool = False

    @property
    def can_recover(self) -> bool:
        """RECOVER: a card's verdict forms and its reconciler's "Check now"."""
        return self.can_settle

    def may_change(self, note: Note) -> bool:
        return self.can_add and (self.admin or (note.author_id is not None and note.author_id == self.user_id))

    @property
    def key(self) -> tuple:
        """What frames rendered for these rights depend on: viewers share one render, admins one, a member their own."""
        return (self.can_add, self.admin, self.user_id if self.can_add and not self.admin else None, self.can_settle)


def note_rights(actor: access.Actor, project_id: int) -> NoteRights:
    return NoteRights(
        can_add=actor.can(project_id, access.APPEND), admin=actor.can(project_id, access.ADMIN), user_id=actor.user.pk if actor.user else None,
        can_settle=actor.can(project_id, access.RECOVER),
    )


def tags_from(text: str) -> list[str]:
    """The form's tags field: words split on spaces and commas (services.notes judges each)."""
    return [word for word in re.split(r"[\s,]+", text) if word]


def place_of(session_id: str, seq: int | None) -> str:
    return reverse("session_detail", args=[session_id]) + (f"#seq-{seq}" if seq is not None else "#ledger-panel")


@login_required
@require_http_methods(["GET", "POST"])
def add_note(request, session_id: str):
    """POST text, tags and seq (empty: a note on the whole session). GET: the form on its own page, filled
    with what an inline form sent without JavaScript (inline forms carry no CSRF token: live frames render them)."""
    data = request.POST if request.method == "POST" else request.GET
    seq = decimal_int(data.get("seq", ""), name="seq")
    form = {"text": data.get("text", ""), "tags": data.get("tags", ""), "seq": seq, "session_id": session_id}
    if request.method == "GET":
        session_or_refusal(request, session_id)
        return render(request, "sessions/note_form.html", form)
    try:
        note = services.add_note(
            actor=access.actor_of(request), session_id=session_id, text=form["text"], tags=tags_from(form["tags"]), seq=seq
        )
    except errors.SessionNotFound:
        raise Http404(f"No session {session_id!r}") from None
    except access.Forbidden as refused:
        raise PermissionDenied(refused.detail) from None
    except errors.InvalidNote as invalid:
        return refused_form(request, "sessions/note_form.html", {**form, "error": invalid})
    return done(request, note)


def done(request, note) -> HttpResponse:
    """After a change: nothing for htmx (the page's socket shows it), else back to the note's place."""
    if request.htmx:
        return HttpResponse(status=204)
    return redirect(place_of(note.session_id, note.seq))


@login_required
@require_http_methods(["GET", "POST"])
def edit_note(request, note_id: int):
    """GET: the edit form (inline for htmx, else its page); POST text and tags: the edit."""
    note = changeable_note(request, note_id)
    if request.method == "GET":
        context = {"note": note, "text": note.text, "tags": " ".join(note.tags)}
        return render(request, "sessions/note_edit.html#edit-form" if request.htmx else "sessions/note_edit.html", context)
    form = {"note": note, "text": request.POST.get("text", ""), "tags": request.POST.get("tags", "")}
    try:
        services.edit_note(actor=access.actor_of(request), note_id=note.pk, text=form["text"], tags=tags_from(form["tags"]))
    except errors.InvalidNote as invalid:
        return refused_form(request, "sessions/note_edit.html", {**form, "error": invalid}, partial="edit-form")
    return done(request, note)


@login_required
@require_http_methods(["GET", "POST"])
def delete_note(request, note_id: int):
    """POST: delete (htmx posts the note's Delete link); GET: a page asking to confirm, without JavaScript."""
    note = changeable_note(request, note_id)
    if request.method == "GET":
        return render(request, "sessions/note_edit.html", {"note": note, "deleting": True})
    services.delete_note(actor=access.actor_of(request), note_id=note.pk)
    return done(request, note)


def session_or_refusal(request, session_id: str) -> None:
    """404 when the user may not see the session, 403 when they may not add notes to it."""
    try:
        access.session_for(access.actor_of(request), session_id, access.APPEND)
    except errors.SessionNotFound:
        raise Http404(f"No session {session_id!r}") from None
    except access.Forbidden as refused:
        raise PermissionDenied(refused.detail) from None


def changeable_note(request, note_id: int) -> Note:
    """The note, if the user may change it: 404 when they may not see it, 403 when they may only read it."""
    try:
        return access.note_for(access.actor_of(request), note_id, change=True)
    except errors.NoteNotFound:
        raise Http404(f"No note {note_id}") from None
    except access.Forbidden as refused:
        raise PermissionDenied(refused.detail) from None


def refused_form(request, template: str, context: dict, *, partial: str = "note-form"):
    """The form again with the reason: inline for htmx (200, which it swaps), else on its page with a 422."""
    if request.htmx:
        return render(request, f"{template}#{partial}", context)
    return render(request, template, context, status=422)
