"""Pages. Thin: they read through selectors and the view objects of dashboard.pages (transcript,
raw_log, recovery_page), write through services."""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from dashboard.pages import (
    ledger as ledger_panel,
)
from dashboard.pages import (
    notes,
    plan_change,
    raw_log,
    refusals,
    transcript,
)
from dashboard.pages import (
    recovery as recovery_page,
)
from dashboard.pages import (
    search as search_hits,
)
from dashboard.pages import (
    session as session_page,
)
from dashboard.pages import (
    session_list as list_view,
)
from sessions_app import selectors, services
from sessions_app.lib import errors
from sessions_app.lib.params import decimal_int
from sessions_app.lib.wording import seq_range
from sessions_app.log import events as log_events
from sessions_app.log import fork as log_fork
from sessions_app.log import recovery as log_recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.log import values as log_values
from sessions_app.models import SESSION_ID_PATTERN, session_id_validator
from sessions_app.selectors import access


def session_or_404(request, session_id: str, capability: str = access.READ):
    """The session if the user may do `capability` with it: 404 when they may not see it, 403 when only not this."""
    try:
        return access.session_for(access.actor_of(request), session_id, capability)
    except errors.SessionNotFound:
        raise Http404(f"No session {session_id!r}") from None
    except access.Forbidden as refused:
        raise PermissionDenied(refused.detail) from None


def session_rights(request, session) -> dict:
    """What the page offers this user: controls they could not use are not shown."""
    actor = access.actor_of(request)
    return {
        "can_recover": actor.can(session.project_id, access.RECOVER),
        "can_fork": actor.can(session.project_id, access.FORK),
        "can_delete": actor.can(session.project_id, access.ADMIN),
    }


def page_note_rights(request, session) -> notes.NoteRights:
    return notes.note_rights(access.actor_of(request), session.project_id)


ROWS_TARGETS = {"session-rows", "more-rows"}
# The search hits' swaps: the section as the box changes, the next page in place of "More matches".
HITS_TARGETS = {"search-hits": "search-hits", "more-hits": "hit-items"}


@login_required
def session_list(request):
    seen_at = timezone.now()  # before the reads: the live socket catches up from here (dashboard/live/seen.py)
    status = request.GET.get("status") if request.GET.get("status") in selectors.STATUSES else None
    q = request.GET.get("q", "").strip()
    projects = list(access.projects(access.actor_of(request)))
    project = next((p for p in projects if p.slug == request.GET.get("project")), None)
    # A filter the page cannot apply is dropped, and the page says so rather than list everything silently.
    ignored = []
    if request.GET.get("status") and status is None:
        ignored.append(f"status {request.GET['status']!r} is not one of {', '.join(selectors.STATUSES)}: every status is shown.")
    if request.GET.get("project") and project is None:
        ignored.append(f"project {request.GET['project']!r} is not a project of yours: every project is shown.")
    scope = [project.pk] if project else [p.pk for p in projects]
    context = {
        "status": status, "q": q, "statuses": selectors.STATUSES, "projects": projects, "project": project, "ignored": ignored,
        "models": list_view.models_seen(scope), "ranges": list_view.RANGE_NAMES, "view": list_view.ListView(),
        "sort_columns": list_view.SORT_COLUMNS, "base_query": list_view.base_query(status, q, project), "seen_at": seen_at,
    }  # fmt: skip
    try:
        context["view"] = view = list_view.read_view(request.GET)
    except list_view.BadFilter as exc:
        return refusals.bad_request(request, parameter=exc.parameter, detail=str(exc))
    try:
        hits = search_hits.hits_for(q, scope, request.GET.get("hits_cursor") or None)
    except search_hits.search.InvalidCursor as exc:
        return refusals.bad_request(request, parameter="hits_cursor", detail=str(exc))
    if request.htmx.target in HITS_TARGETS:
        return render(request, f"sessions/list.html#{HITS_TARGETS[request.htmx.target]}", {"hits": hits, "q": q, "project": project})
    try:
        page = selectors.list_sessions(
            status=status, q=q, projects=scope, limit=50, cursor=request.GET.get("cursor") or None, labelled=True,
            sort=view.sort, narrow=view.narrow,
        )  # fmt: skip
    except selectors.InvalidCursor as exc:
        return refusals.bad_request(request, parameter="cursor", detail=str(exc))
    selectors.mark_unknown_settled(page.items)  # the rows' "all unknown calls settled"
    list_view.bill_rows(page.items)
    context |= {"page": page, "hits": hits}
    # The rows alone for htmx swaps into the table (search, "Older sessions"), told by the
    # swap's target rather than a query parameter, so the URL pushed to the history reloads as the page.
    if request.htmx.target in ROWS_TARGETS:
        return render(request, "sessions/list.html#rows", context)
    return render(request, "sessions/list.html", context)


@login_required
def session_detail(request, session_id: str):
    seen_at = timezone.now()  # before the reads: the live socket catches up from here (dashboard/live/seen.py)
    session = session_or_404(request, session_id)
    view = session_page.RAW if request.GET.get("view") == "raw" else session_page.TRANSCRIPT
    rights = session_rights(request, session)
    # The header and tab bar's inputs, as every live frame of this page computes them.
    context = {
        **session_page.header_context(session, can_fork=rights["can_fork"], tab=view),
        "seen_at": seen_at,
        "highlight": highlighted_seqs(request),
        **rights,
        **ledger_panel.panel_context(
            session, all_calls=ledger_panel.wants_all(request.GET.get("calls")), tab=view, note_rights=page_note_rights(request, session)
        ),
    }
    if view == "raw":
        context["raw"] = raw_log.raw_page(session, before=decimal_int(request.GET.get("before", ""), name="before"))
    else:
        context["window"] = transcript.latest_window(session)
    return render(request, "sessions/detail.html", context)


def highlighted_seqs(request) -> range:
    """?highlight=FIRST-LAST marks events just appended (e.g. by a recovery)."""
    first, _, last = request.GET.get("highlight", "").partition("-")
    first, last = decimal_int(first, name="highlight"), decimal_int(last, name="highlight")
    if first is not None and last is not None:
        return range(first, last + 1)
    return range(0)


@login_required
def session_blocks(request, session_id: str):
    """Earlier blocks of the transcript, loaded on demand."""
    session = session_or_404(request, session_id)
    window = transcript.latest_window(session, before=decimal_int(request.GET.get("before", ""), name="before"))
    context = {"session": session, "window": window, "note_rights": page_note_rights(request, session), **session_rights(request, session)}
    return render(request, "sessions/detail.html#earlier", context)


@login_required
def session_turn_page(request, session_id: str):
    """One page of a long turn in place of its stub (an out-of-band swap): ?turn=T&page=K, or ?seq=N for the page that
    holds the event's anchor (a link to #seq-N on a page not shown). 204 when N stands outside every turn."""
    session = session_or_404(request, session_id)
    seq = decimal_int(request.GET.get("seq", ""), name="seq")
    if seq is not None:
        turn, number = transcript.page_holding(session, seq)
        if turn is None:
            return HttpResponse(status=204)
    else:
        turn, number = decimal_int(request.GET.get("turn", ""), name="turn"), decimal_int(request.GET.get("page", ""), name="page")
        if turn is None or number is None:
            return refusals.bad_request(request, parameter="turn", detail="give ?turn= and ?page= (numbers), or ?seq=")
    block = transcript.turn_page(session, turn, number)
    if block is None:
        raise Http404(f"No page {number} of a turn at seq {turn} in session {session_id!r}")
    context = {"session": session, "block": block, "page": block.pages[number], "page_oob": True, "highlight": range(0)}
    return render(request, "sessions/detail.html#page", {**context, "note_rights": page_note_rights(request, session), **session_rights(request, session)})


@login_required
def session_ledger_rows(request, session_id: str):
    """Rows of the ledger panel by id (?rows=ledger-call-...,...), as out-of-band swaps, with the panel's order: what a
    live page lacks or holds in another version (dashboard.pages.ledger)."""
    session = session_or_404(request, session_id)
    ids = {part for part in request.GET.get("rows", "").split(",") if part}
    html = ledger_panel.rows_asked(
        session, all_calls=ledger_panel.wants_all(request.GET.get("calls")), tab=session_page.TRANSCRIPT,
        note_rights=page_note_rights(request, session), ids=ids,
    )  # fmt: skip
    return HttpResponse(html)


@login_required
def event_json(request, session_id: str, seq: int):
    """One event in full: where truncated values link to."""
    session = session_or_404(request, session_id)
    found = selectors.events_since(session, since=seq, limit=1)
    if not found or found[0].seq != seq:
        raise Http404(f"No event {seq} in session {session_id!r}")
    return JsonResponse(log_events.event_to_wire(found[0]), json_dumps_params={"indent": 2, "ensure_ascii": False})


@login_required
@require_http_methods(["GET", "POST"])
def fork_session(request, session_id: str):
    """GET ?boundary=: the fork form for that boundary (inline where htmx asked for it);
    POST boundary, id: fork, then open the new session, which confirms it."""
    session = session_or_404(request, session_id, access.FORK)
    data = request.POST if request.method == "POST" else request.GET
    raw = data.get("boundary", "last")
    boundary = decimal_int(raw, name="boundary")
    boundary = raw if boundary is None else boundary  # a seq, or a name ("last") the fork rules judge
    context = {"session": session, "boundary": raw, **session_rights(request, session)}
    try:
        seq = selectors.fork_point(session, boundary).seed_length - 1
    except log_fork.ForkRefused as refused:
        return fork_form(request, {**context, "refused": refused}, status=422 if request.method == "POST" else 200)
    context["seq"] = seq
    if request.method != "POST":
        return fork_form(request, {**context, "name": selectors.unused_fork_id(session, seq)})
    name = data.get("id", "").strip() or selectors.unused_fork_id(session, seq)
    if not re.fullmatch(SESSION_ID_PATTERN, name):
        return fork_form(request, {**context, "name": name, "name_error": session_id_validator.message}, status=422)
    try:
        child = services.fork(session_id=session.id, boundary=boundary, new_session_id=name, user=request.user)
    except log_fork.ForkRefused as refused:  # "last" after a turn opened since the form was shown
        return fork_form(request, {**context, "refused": refused}, status=422)
    except errors.SessionExists:
        error = f"A session named {name} already exists: pick another name."
        return fork_form(request, {**context, "name": selectors.unused_fork_id(session, seq), "name_error": error}, status=422)
    inherited = child.seed_length - 1
    what = "event 0 is" if inherited == 0 else f"events 0–{inherited} are"
    messages.success(
        request,
        f"Forked {session.id} at seq {inherited} into this session: {what} inherited."
        if inherited >= 0
        else f"Forked {session.id} (it had no events yet) into this session.",
    )
    url = reverse("session_detail", args=[child.id])
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


def fork_form(request, context: dict, *, status: int = 200):
    """The form in place of the control that asked for it (htmx), else on a page of its own.

    htmx swaps only 2xx answers, so it gets a refusal or a bad name as 200;
    other clients get the honest 422.
    """
    if request.htmx:
        return render(request, "sessions/fork.html#fork-form", context)
    return render(request, "sessions/fork.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def recovery_preview(request, session_id: str):
    session = session_or_404(request, session_id, access.RECOVER if request.method == "POST" else access.READ)
    if request.method == "POST":
        return confirm_recovery(request, session)
    # The live banner's "Show the new plan" sends the choices along, so the new plan keeps them.
    context = recovery_context(session, session_rights(request, session), choices=recovery_choices(request.GET))
    return render(request, "sessions/recovery.html", context)


def recovery_choices(data) -> dict:
    """What the person chose on the confirm form, to fill it in again."""
    return {"abandon": bool(data.get("abandon")), "context": bool(data.get("context")), "note": data.get("note", "").strip()}


def recovery_context(session, rights: dict, *, choices: dict, stale_from: tuple[int | None, str] | None = None) -> dict:
    """The preview; `stale_from` is the plan (next_seq, digest) a refused confirm was made from."""
    plan = selectors.recovery_plan(session)
    preview = recovery_page.recovery_preview(session, plan)
    dangling = selectors.dangling_patch(session) if not plan.interrupted else []
    digest = plan.digest(session.event_count)
    shown_next_seq, shown_digest = stale_from or (session.event_count, digest)
    return {
        "session": session,
        "status": session.status,
        "plan": plan,
        "preview": preview,
        "digest": digest,
        **rights,
        **plan_change.plan_change_context(session, shown_next_seq=shown_next_seq, shown_digest=shown_digest, plan=plan),
        "stale": stale_from is not None,
        "choices": choices,
        "recoveries": selectors.recovery_history(session),
        "dangling": dangling,
        "dangling_digest": log_recovery.repairs_digest(session.event_count, dangling),
        "abandon_advice": log_strategy.ADVICE[log_strategy.ABANDON],
    }


def confirm_recovery(request, session):
    action = request.POST.get("action", "recover")
    options = {"session_id": session.id, "user": request.user, "digest": request.POST.get("digest", ""), "note": request.POST.get("note", "").strip()}
    if action == "patch":
        apply = services.patch_dangling_calls
    else:  # section 8.1: the recovery-context message and abandoning are the person's choice
        apply = services.recover
        options |= {"context": bool(request.POST.get("context")), "abandon": bool(request.POST.get("abandon"))}
    try:
        result = apply(**options)
    except errors.StalePlan:
        session.refresh_from_db()
        # The fresh plan, with what the person chose kept and the events since the plan they confirmed counted.
        rights, choices = session_rights(request, session), recovery_choices(request.POST)
        context = recovery_context(session, rights, choices=choices, stale_from=plan_change.shown_plan(request.POST))
        return render(request, "sessions/recovery.html", context, status=409)
    except (errors.RecoveryFirst, log_values.UnacceptableValue) as exc:
        messages.error(request, str(exc))
        return redirect("recovery_preview", session.id)
    if not result.appended:
        messages.info(request, "Nothing to append: the session needs no repair.")
        return redirect("session_detail", session.id)
    first, last = result.appended[0].seq, result.appended[-1].seq
    record = result.record
    told = f" The recovery note for the agent is seq {record.context_seq}." if record.context_seq is not None else ""
    told += " Recorded as abandoned." if record.abandoned else ""
    messages.success(request, f"Appended {seq_range(first, last)}. Recorded as {record}.{told}")
    return redirect(f"{reverse('session_detail', args=[session.id])}?highlight={first}-{last}#seq-{first}")


@login_required
def session_lineage(request, session_id: str):
    session = session_or_404(request, session_id)
    rights = session_rights(request, session)
    context = {**session_page.header_context(session, can_fork=rights["can_fork"], tab="lineage"), "lineage": selectors.lineage(session), **rights}
    return render(request, "sessions/lineage.html", context)
