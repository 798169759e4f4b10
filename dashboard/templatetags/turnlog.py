import functools
import hashlib
import json
import re

from django import template
from django.conf import settings
from django.urls import reverse
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

from sessions_app.lib import wording
from sessions_app.log import clock as log_clock

register = template.Library()
register.filter("seconds", wording.seconds)
register.filter("json_text", wording.json_text)


@register.filter
def dom_id(value: object) -> str:
    """A DOM id safe in CSS selectors for any session or call id (which may hold ':' or '.')."""
    text = str(value)
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", text)
    return safe if safe == text else f"{safe}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


@register.filter
def pretty_json(value: object) -> str:
    """Indented JSON of a value (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def seqs(value, last=None) -> str:
    """`{{ pair|seqs }}` for a (first, last) pair, or `{{ first|seqs:last }}`: see sessions_app.lib.wording.seq_range."""
    first, last = (value[0], value[1]) if last is None else (value, last)
    return wording.seq_range(first, last)


@register.filter
def as_value(data: object):
    """Event data shown as the transcript shows content (dashboard.pages.blocks.Value): JSON, cut when long."""
    from dashboard.pages import blocks  # the pages' module imports the models; templates load tags early

    return blocks.Value.of(data)


@register.filter
def at(mapping: dict | None, key: object) -> object:
    """mapping[key], or None: templates cannot index by a variable."""
    return (mapping or {}).get(key)


@register.filter
def may_change(rights, note) -> bool:
    """Whether the page shows this person controls to edit and delete the note (dashboard.pages.notes.NoteRights)."""
    return rights is not None and rights.may_change(note)


@register.simple_tag
def innermost_strategy(session):
    """The recommended strategy of a session's innermost open turn (sessions_app.log.strategy.TurnStrategy), or None."""
    from dashboard.pages import recovery  # the pages' module imports the models; templates load tags early

    return recovery.innermost_strategy(session)


@register.simple_tag
def clock_skew(claimed, received) -> str:
    """ "clock ahead by 178 d" where a claimed time and its receive time differ by more than
    TURNLOG_CLOCK_SKEW_SECONDS, else "" (sessions_app.log.clock; pages and live frames alike)."""
    return log_clock.skew_note(claimed, received, settings.TURNLOG_CLOCK_SKEW_SECONDS)


@functools.lru_cache(maxsize=1024)
def _pages_url(session_id: str) -> str:
    return conditional_escape(reverse("session_turn_page", args=[session_id]))


def stub_html(session_id: str, page, oob: bool = False) -> str:
    first, last, swap = int(page.first_seq), int(page.last_seq), ' hx-swap-oob="true"' if oob else ""
    return (
        f'<div class="page-stub" id="page-{int(page.turn_seq)}-{int(page.number)}" data-first="{first}" data-last="{last}"{swap}>'
        f'<span class="stub-from">Not shown: seq {first}</span><span class="stub-to"> to seq {last}</span> '
        f'<button type="button" hx-get="{_pages_url(session_id)}?turn={int(page.turn_seq)}&amp;page={int(page.number)}" '
        f'hx-swap="none">Show seq {first}–{last}</button></div>'
    )


@register.simple_tag
def page_stubs(session_id: str, pages, oob: bool = False) -> str:
    """A long turn's pages not shown (dashboard.pages.transcript), each as the button that opens it. Built here rather
    than by a partial, from the escaped URL and numbers alone: a turn of 100,000 events has 2,500 of them."""
    return mark_safe("".join(stub_html(session_id, page, oob) for page in pages))


@register.filter
def listed(value) -> list:
    """[value]: a tag that takes a list, given one."""
    return [value]
