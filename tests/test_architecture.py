"""The layout's rules (docs/internals/architecture.md), checked on the source: imports only go down,
and pages and live code query no model manager themselves.

Every import counts, those inside functions too: a lazy import is still a dependency,
and the circles this layout broke were lazy ones. Imports under `if TYPE_CHECKING:` do not
(they name a type for the reader and never run). The source is parsed, not imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("sessions_app", "dashboard", "turnlog_client")

# Rooms from the bottom up, per top-level package: a module may import its own room and the
# rooms below it, never one above. Every module must belong to a room (a new one is placed here
# and in docs/internals/architecture.md). A name matches itself and everything under it; one ending in "="
# matches only itself (a package's own __init__).
ROOMS = {
    "sessions_app": [
        ("core", ["sessions_app.log", "sessions_app.otel.mapping"]),
        ("support", ["sessions_app=", "sessions_app.errors", "sessions_app.params",
                     "sessions_app.wording", "sessions_app.field_paths", "sessions_app.cursors",
                     "sessions_app.db_threads", "sessions_app.statements", "sessions_app.demo",
                     # The metrics' instruments: the writes and the live side count with them (the room is a door).
                     "sessions_app.metrics.instruments", "sessions_app.metrics="]),
        ("models", ["sessions_app.models"]),
        ("reads", ["sessions_app.selectors", "sessions_app.access", "sessions_app.converters",
                   "sessions_app.search"]),
        ("writes", ["sessions_app.services", "sessions_app.invitations", "sessions_app.ledger",
                    "sessions_app.notify", "sessions_app.retention"]),
        # The app's config is a door: Django calls its ready(), which connects the writes' receivers.
        ("doors", ["sessions_app.api", "sessions_app.otel", "sessions_app.admin", "sessions_app.management",
                   "sessions_app.worker", "sessions_app.metrics", "sessions_app.apps"]),
    ],
    "dashboard": [
        ("support", ["dashboard=", "dashboard.outage", "dashboard.secret_key", "dashboard.log_filters",
                     "dashboard.json_logs", "dashboard.lockout", "dashboard.settings", "dashboard.locations"]),
        ("pages", ["dashboard.pages", "dashboard.templatetags"]),
        ("live", ["dashboard.live"]),
        ("site", ["dashboard.urls", "dashboard.routing", "dashboard.asgi", "dashboard.middleware",
                  "dashboard.lanes", "dashboard.health", "dashboard.access_log", "dashboard.cli"]),
    ],
    "turnlog_client": [("client", ["turnlog_client"])],
}

# Rooms that may import nothing but the standard library, these third-party packages and themselves.
PURE = {
    "sessions_app.log": {"orjson"},
    # The mapping writes events of the log's core: it may use that core (pure too), nothing else of the project.
    # google.protobuf is opentelemetry-proto's runtime: the decoder catches its parse errors.
    "sessions_app.otel.mapping": {"orjson", "opentelemetry", "google.protobuf", "sessions_app.log"},
    "turnlog_client": {"httpx", "websockets", "orjson"},
    # Counted from every layer, so it may lean on none of them.
    "sessions_app.metrics.instruments": {"prometheus_client"},
}
# A pure room's module that serves an optional extra may import that extra's package too (and nothing else may).
EXTRAS = {"turnlog_client.agents": {"agents"}}

# Project packages a room may never import, whatever the layering says.
FORBIDDEN = {
    "sessions_app": ["dashboard", "tests", "bench", "turnlog_client"],
    "dashboard": ["tests", "bench", "turnlog_client"],
    # Pages and live code read through selectors and write through services, never through the doors.
    "dashboard.pages": ["sessions_app.api", "sessions_app.admin", "sessions_app.management", "sessions_app.worker"],
    "dashboard.live": ["sessions_app.api", "sessions_app.admin", "sessions_app.management", "sessions_app.worker"],
    "dashboard.templatetags": ["sessions_app.api", "sessions_app.admin", "sessions_app.management", "sessions_app.worker"],
}

# The exceptions to FORBIDDEN: the commands may drive a running server through the client, as an
# agent would (`manage.py simulate`); nothing else of the server may.
EXCEPTED = {"sessions_app.management": ["turnlog_client"]}

# Rooms that read through sessions_app.selectors only: no `Model.objects` of their own.
READ_THROUGH_SELECTORS = ["dashboard.pages", "dashboard.live", "dashboard.templatetags"]


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PRODUCT
        if (ROOT / package).is_dir()
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and "tests" not in path.relative_to(ROOT).parts  # turnlog_client/tests: tests, not product
    }


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """Every module `path` imports, anywhere in it; `from package import module` names the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found - {name}


def runtime_nodes(tree: ast.AST):
    """Every node of `tree` but those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}:
            yield from (n for child in node.orelse for n in [child, *runtime_nodes(child)])
            continue
        yield node
        yield from runtime_nodes(node)


def room_of(module: str) -> tuple[int, str] | None:
    """(height, room) of a product module: the most specific prefix of its package's rooms wins."""
    best = None
    for height, (room, prefixes) in enumerate(ROOMS.get(module.split(".")[0], [])):
        for prefix in prefixes:
            matches = module == prefix[:-1] if prefix.endswith("=") else within(module, prefix)
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), height, room)
    return None if best is None else best[1:]


MODULES = product_modules()
IMPORTS = {name: imports_of(path, name, set(MODULES)) for name, path in MODULES.items()}


def test_every_module_has_a_room():
    assert [m for m in MODULES if room_of(m) is None] == []


def violations_of_rooms(imports: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in imports.items():
        here = room_of(module)
        for target in targets:
            if target.split(".")[0] != module.split(".")[0] or here is None:
                continue
            there = room_of(target)
            if there is not None and there[0] > here[0]:
                found.append(f"{module} ({here[1]}) imports {target} ({there[1]}), a room above it")
    return sorted(found)


def violations_of_purity(imports: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in imports.items():
        for room, allowed in PURE.items():
            if not within(module, room):
                continue
            for target in targets:
                top = target.split(".")[0]
                if within(target, room) or top in sys.stdlib_module_names or top == "__future__":
                    continue
                if top in allowed | EXTRAS.get(module, set()) or any(within(target, name) for name in allowed if "." in name):
                    continue
                found.append(f"{module} is pure ({room}) and imports {target}")
    return sorted(found)


def violations_of_boundaries(imports: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in imports.items():
        allowed = [a for room, excepted in EXCEPTED.items() if within(module, room) for a in excepted]
        for room, banned in FORBIDDEN.items():
            if within(module, room):
                found += [
                    f"{module} imports {t}, which {room} may not"
                    for t in targets for b in banned if within(t, b) and not any(within(t, a) for a in allowed)
                ]  # fmt: skip
    return sorted(found)


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """Import circles between product modules (a package's own __init__ re-exporting its modules excepted)."""
    graph = {
        m: {t for t in targets if t in imports and not (within(t, m) and MODULES.get(m, Path()).name == "__init__.py")}
        for m, targets in imports.items()
    }
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def manager_queries(sources: dict[str, str]) -> list[str]:
    """Every model manager (an `.objects` attribute) that a module of READ_THROUGH_SELECTORS touches."""
    found = []
    for module, source in sources.items():
        if any(within(module, room) for room in READ_THROUGH_SELECTORS):
            found += [
                f"{module}:{node.lineno} queries {ast.unparse(node)}; read through sessions_app.selectors"
                for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Attribute) and node.attr == "objects"
            ]
    return sorted(found)


def test_imports_only_go_down():
    assert violations_of_rooms(IMPORTS) == []


def test_the_pure_rooms_import_no_django_and_nothing_of_the_project_outside_themselves():
    assert violations_of_purity(IMPORTS) == []


def test_no_room_reaches_what_it_may_not():
    assert violations_of_boundaries(IMPORTS) == []


def test_no_module_imports_itself_back_through_a_circle():
    assert cycles(IMPORTS) == []


def test_pages_and_live_code_query_no_model_manager_themselves():
    assert manager_queries({name: path.read_text() for name, path in MODULES.items()}) == []


# The checks themselves, on made-up modules: each rule fails for the import it exists to catch.
@pytest.mark.parametrize(
    "check, imports",
    [
        (violations_of_purity, {"sessions_app.log.events": {"django.db"}}),
        (violations_of_purity, {"sessions_app.log.fold": {"sessions_app.models"}}),
        (violations_of_purity, {"turnlog_client.stream": {"sessions_app.log.events"}}),
        (violations_of_purity, {"turnlog_client.client": {"agents"}}),
        (violations_of_boundaries, {"sessions_app.selectors": {"dashboard.pages.transcript"}}),
        (violations_of_boundaries, {"dashboard.pages.sessions": {"sessions_app.api.app"}}),
        (violations_of_boundaries, {"sessions_app.services.appends": {"turnlog_client.client"}}),
        (violations_of_boundaries, {"dashboard.live.stream": {"turnlog_client"}}),
        (violations_of_rooms, {"sessions_app.models": {"sessions_app.services"}}),
        (violations_of_rooms, {"sessions_app.selectors": {"sessions_app.services.appends"}}),
        (violations_of_rooms, {"dashboard.pages.transcript": {"dashboard.live.stream"}}),
        (violations_of_rooms, {"dashboard.live.stream": {"dashboard.middleware"}}),
        (violations_of_rooms, {"dashboard.outage": {"dashboard.live.stream"}}),
    ],
)
def test_each_rule_refuses_an_import_against_it(check, imports):
    assert check(imports) != []


@pytest.mark.parametrize("module", ["dashboard.pages.transcript", "dashboard.live.sessions", "dashboard.templatetags.turnlog"])
def test_the_manager_check_refuses_a_query_in_pages_or_live_code(module):
    assert manager_queries({module: "Session.objects.get(pk=1)"}) != []


def test_the_manager_check_leaves_the_reads_alone():
    assert manager_queries({"sessions_app.selectors.transcript": "Session.objects.get(pk=1)"}) == []


def test_the_circle_check_finds_a_lazy_circle():
    assert cycles({"dashboard.middleware": {"dashboard.live.stream"}, "dashboard.live.stream": {"dashboard.middleware"}}) != []


MAX_LINES = 450


def oversized(line_counts: dict[str, int], doc: str) -> list[str]:
    """Modules over MAX_LINES that docs/internals/architecture.md does not justify (a bullet naming the path)."""
    section = doc.split("## Modules over 450 lines", 1)[1].split("\n## ", 1)[0]
    return sorted(path for path, count in line_counts.items() if count > MAX_LINES and f"- `{path}`" not in section)


def test_no_module_is_over_450_lines_without_a_reason_in_the_docs():
    counts = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in MODULES.values()}
    assert oversized(counts, (ROOT / "docs" / "internals" / "architecture.md").read_text()) == []


def test_the_size_check_refuses_a_long_module_unless_the_docs_say_why():
    doc = "## Modules over 450 lines\n\n- `dashboard/pages/long.py`: a reason.\n\n## Tests\n- `sessions_app/long.py`\n"
    counts = {"dashboard/pages/long.py": 600, "sessions_app/long.py": 451, "sessions_app/short.py": 450}
    assert oversized(counts, doc) == ["sessions_app/long.py"]


def test_the_rooms_are_the_ones_docs_architecture_describes():
    doc = (ROOT / "docs" / "internals" / "architecture.md").read_text()
    for rooms in ROOMS.values():
        for room, prefixes in rooms:
            for prefix in (p.removesuffix("=") for p in prefixes):
                assert f"`{prefix.replace('.', '/')}" in doc or f"`{prefix}`" in doc, prefix


def test_the_commands_alone_may_drive_a_server_through_the_client():
    assert violations_of_boundaries({"sessions_app.management.commands.simulate": {"turnlog_client.client"}}) == []
    assert violations_of_boundaries({"sessions_app.worker": {"turnlog_client.client"}}) != []
