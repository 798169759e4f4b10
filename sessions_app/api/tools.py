"""A project's tools and tool policies over HTTP (api.md, "Verdicts, receipts and reconcilers"): the tool
names its calls used, each classed by the policies now, and its admins' changes to its own policies.

`{pattern}` is the rest of the path, percent-decoded: a pattern holding "/" sent as %2F stays one pattern
(as would a bare "/", the last segment being the pattern's end), and "*" may be sent as it is or as %2A.
"""

from __future__ import annotations

from typing import Literal

from ninja import Field, Router, Schema, Status
from pydantic import StrictStr

from sessions_app.api.schemas import BODY_ERRORS, ErrorOut
from sessions_app.log import policies as log_policies
from sessions_app.models import ToolPolicy
from sessions_app.selectors import access
from sessions_app.selectors import tools as tool_selectors
from sessions_app.services import tool_policies

router = Router(tags=["tools"])
CLASS_WORDS = "read_only, idempotent, external_effect or unknown (no policy matches the tool)"


class ToolOut(Schema):
    name: str
    calls: int = Field(..., description="the project's calls of this tool")
    unknown_calls: int = Field(..., description="those whose state is tool_outcome_unknown")
    class_: Literal["read_only", "idempotent", "external_effect", "unknown"] = Field(..., alias="class", description=CLASS_WORDS)


class PolicyOut(Schema):
    pattern: str
    side_effect: Literal["read_only", "idempotent", "external_effect"]
    note: str
    receipt_pointer: str = Field(..., description="an RFC 6901 pointer into a real result's content; empty: none")
    check_url: str = Field(..., description="the reconciler's address; empty: none")
    scope: str = Field(..., description="project or site")
    check_secret: str | None = Field(
        None, description="the reconciler's signing secret (whsec_...): only in the answer that set or changed check_url"
    )


class ToolsOut(Schema):
    tools: list[ToolOut]
    policies: list[PolicyOut]


class PolicyIn(Schema):
    side_effect: StrictStr = Field(..., description="read_only, idempotent or external_effect")
    note: StrictStr | None = Field(None, description="at most 300 characters (absent: unchanged, empty on a new policy)")
    receipt_pointer: StrictStr | None = Field(
        None, description="an RFC 6901 pointer such as /id, or empty for none (absent: unchanged, empty on a new policy)"
    )
    check_url: StrictStr | None = Field(
        None, description="an http(s) URL the webhooks' address rules allow, or empty for none (absent: unchanged)"
    )


def policy_to_wire(policy: log_policies.Policy | ToolPolicy, secret: str | None = None) -> dict:
    wire = {
        "pattern": policy.pattern, "side_effect": policy.side_effect, "note": policy.note,
        "receipt_pointer": policy.receipt_pointer, "check_url": policy.check_url, "scope": policy.scope,
    }  # fmt: skip
    return wire if secret is None else {**wire, "check_secret": secret}


@router.get("/projects/{slug}/tools", response={200: ToolsOut, 404: ErrorOut}, by_alias=True, exclude_none=True)
def project_tools(request, slug: str):
    """Every tool name the project's calls used, with its class now, and every policy that applies in the project."""
    project = access.project_for(access.actor_of(request), slug, access.READ)
    found = tool_selectors.project_tools(project)
    tools = [{"name": t.name, "calls": t.calls, "unknown_calls": t.unknown_calls, "class": t.side_effect} for t in found.tools]
    return {"tools": tools, "policies": [policy_to_wire(p) for p in found.policies]}


@router.put(
    "/projects/{slug}/tools/policies/{path:pattern}", response={200: PolicyOut, 403: ErrorOut, 404: ErrorOut, **BODY_ERRORS}, exclude_none=True
)
def save_policy(request, slug: str, pattern: str, payload: PolicyIn):
    """Create or change the project's policy for `pattern` (the project's admins)."""
    policy, secret = tool_policies.save_policy(
        actor=access.actor_of(request), project_slug=slug, pattern=pattern, side_effect=payload.side_effect,
        note=payload.note, receipt_pointer=payload.receipt_pointer, check_url=payload.check_url,
    )  # fmt: skip
    return policy_to_wire(policy, secret)


@router.delete("/projects/{slug}/tools/policies/{path:pattern}", response={204: None, 403: ErrorOut, 404: ErrorOut})
def delete_policy(request, slug: str, pattern: str):
    """Delete the project's own policy for `pattern` (the project's admins); a site-wide one is not the project's to delete."""
    tool_policies.delete_policy(actor=access.actor_of(request), project_slug=slug, pattern=pattern)
    return Status(204, None)

