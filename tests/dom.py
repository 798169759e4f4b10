"""A page as htmx keeps it: parsed HTML, out-of-band swaps applied as htmx 2 applies them, elements compared.

Enough of a DOM (html.parser, no dependency) to apply a live frame to the page a
socket's client loaded and compare the result with a fresh load: `hx-swap-oob="true"`
replaces the element with the same id; `hx-swap-oob="beforeend:#id"` appends the
wrapper's children to that element, an element already there with the same id first
removed (static/turnlog/turnlog.js makes appends idempotent so); `afterbegin:#id` puts them first, and a
row's older copy further down goes (as turnlog.js keeps a list's rows unique); `innerHTML` replaces its
children; `delete` removes it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from html import escape
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass(eq=False)
class Node:
    tag: str | None  # None: text
    attrs: dict[str, str | None] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)
    text: str = ""
    parent: Node | None = None

    def html(self) -> str:
        if self.tag is None:
            return self.text
        attrs = "".join(f" {k}" if v is None else f' {k}="{escape(v)}"' for k, v in self.attrs.items())
        if self.tag in VOID:
            return f"<{self.tag}{attrs}>"
        return f"<{self.tag}{attrs}>{''.join(c.html() for c in self.children)}</{self.tag}>"

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()

    def by_id(self, element_id: str) -> Node | None:
        return next((n for n in self.walk() if n.tag and n.attrs.get("id") == element_id), None)

    def elements(self) -> list[Node]:
        return [c for c in self.children if c.tag is not None]


class _Parser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.root = Node("#root")
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), parent=self.stack[-1])
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(Node(None, text=data, parent=self.stack[-1]))

    def handle_entityref(self, name):
        self.handle_data(f"&{name};")

    def handle_charref(self, name):
        self.handle_data(f"&#{name};")


def parse(html: str) -> Node:
    parser = _Parser()
    parser.feed(html)
    parser.close()
    return parser.root


def _detach(node: Node) -> None:
    if node.parent is not None:
        node.parent.children.remove(node)
        node.parent = None


def apply(page: Node, message: str) -> list[str]:
    """Apply one websocket message's out-of-band swaps to `page`; returns the selectors that found no target."""
    missing = []
    for swap in parse(message).elements():
        how = swap.attrs.pop("hx-swap-oob", None) or "true"
        style, _, selector = how.partition(":")
        target = page.by_id((selector or "#" + swap.attrs.get("id", "")).removeprefix("#"))
        if target is None:
            missing.append(selector or swap.attrs.get("id", ""))
            continue
        if style in ("true", "outerHTML"):
            parent = target.parent
            index = parent.children.index(target)
            parent.children[index] = swap
            swap.parent = parent
        elif style == "beforeend":
            for child in list(swap.children):
                if child.tag and child.attrs.get("id") and (existing := page.by_id(child.attrs["id"])) is not None:
                    _detach(existing)
                child.parent = target
                target.children.append(child)
        elif style == "innerHTML":  # a list's rows as a reload lists them
            for child in list(target.children):
                _detach(child)
            for child in list(swap.children):
                child.parent = target
                target.children.append(child)
        elif style == "afterbegin":  # a list's new rows; turnlog.js then drops a row's older copy further down
            for child in reversed([c for c in swap.children if c.tag]):
                child.parent = target
                target.children.insert(0, child)
            kept = set()
            for row in [c for c in target.children if c.tag and c.attrs.get("id")]:
                if row.attrs["id"] in kept:
                    _detach(row)
                kept.add(row.attrs["id"])
        elif style == "delete":
            _detach(target)
        else:
            raise AssertionError(f"an out-of-band swap this helper does not apply: {how}")
    return missing


def normalized(node: Node | None) -> str | None:
    """The element's HTML without what two correct renders may differ in: whitespace between tags."""
    if node is None:
        return None
    return re.sub(r"\s+", " ", re.sub(r">\s+<", "><", node.html())).strip()


def difference(kept: str | None, fresh: str | None) -> str:
    """A tag-by-tag diff of two normalized elements (kept: the live page's, fresh: a reload's)."""
    lines = difflib.unified_diff(re.split(r"(?=<)", kept or ""), re.split(r"(?=<)", fresh or ""), "live", "reload", lineterm="", n=1)
    return "\n".join(line[:400] for line in lines)


def arrange_ledger(page: Node, fetch) -> None:
    """What static/turnlog/turnlog.js does after each live message: the ledger panel's rows in the order
    #ledger-order lists, those not listed dropped, those missing or in another version fetched (fetch(url) -> html) once."""
    for fetching in (True, False):
        order, body = page.by_id("ledger-order"), page.by_id("ledger-rows")
        if order is None or body is None:
            return
        wanted = [pair.rsplit(":", 1) for pair in order.attrs.get("data-rows", "").split()]
        listed = {row_id for row_id, _ in wanted}
        for row in body.elements():
            if row.attrs.get("id") not in listed:
                _detach(row)
        missing = []
        for row_id, version in wanted:
            row = page.by_id(row_id)
            if row is not None and row.parent is body:
                _detach(row)
                row.parent = body
                body.children.append(row)
            if row is None or row.attrs.get("data-version") != version:
                missing.append(row_id)
        if not missing or not fetching:
            return
        url = order.attrs["data-url"]
        apply(page, fetch(url + ("&" if "?" in url else "?") + "rows=" + ",".join(missing)))
