"""Search over HTTP: events and notes of the caller's projects that match a query, newest first."""

from __future__ import annotations

from ninja import Query, Router

from sessions_app import services
from sessions_app.api.checks import ApiError
from sessions_app.api.schemas import ErrorOut, SearchPageOut
from sessions_app.log import search_text
from sessions_app.selectors import access, search

router = Router(tags=["search"])


@router.get("/search", response={200: SearchPageOut, 422: ErrorOut})
def search_log(
    request,
    q: str = Query("", description=f"words (all must match), or a piece of 3+ characters of a tool name, call id, error code or path; at most {search_text.QUERY_MAX} characters"),
    project: str | None = Query(None, description="only this project (its slug)"),
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = None,
):
    """Hits in message contents, reasoning, tool calls and results, and notes; each with a plain-text snippet."""
    if not q.strip():
        raise ApiError(422, "invalid_query", "q is empty: send the words or the piece to search for", field="q")
    if len(q) > search_text.QUERY_MAX:
        raise ApiError(422, "invalid_query", f"q is {len(q)} characters; at most {search_text.QUERY_MAX}", field="q")
    actor = access.actor_of(request)
    projects = actor.project_ids(access.READ)
    if project is not None:
        projects = list(access.projects(actor).filter(slug=project, pk__in=projects).values_list("pk", flat=True))
    services.index_pending(projects=projects, wait=True)  # what was appended a moment ago is found
    try:
        page = search.search(q=q, projects=projects, limit=limit, cursor=cursor)
    except search.InvalidCursor as exc:
        raise ApiError(422, "invalid_cursor", str(exc), field="cursor") from None
    items = page.items
    if cursor is None:  # a query that is a call's receipt, idempotency key or verdict reference: that call first
        named = search.reference_hits(q, projects)
        at = {(hit.session_id, hit.seq) for hit in named}
        items = [*named, *(hit for hit in items if hit.kind != "event" or (hit.session_id, hit.seq) not in at)]
    return {"items": [hit_to_wire(hit) for hit in items], "next_cursor": page.next_cursor}


def hit_to_wire(hit: search.Hit) -> dict:
    return {
        "kind": hit.kind,
        "session_id": hit.session_id,
        "seq": hit.seq,
        "type": hit.type,
        "note_id": hit.note_id,
        "snippet": hit.snippet,
        "highlights": [list(pair) for pair in hit.highlights],
    }
