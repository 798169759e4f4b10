import io

from django.core.management import call_command

from sessions_app import selectors
from sessions_app.lib import demo
from sessions_app.models import Event, ToolPolicy


def test_every_demo_tool_has_a_side_effect_class_and_everything_that_changes_the_world_is_an_external_effect():
    classes = {name: demo.side_effect_class(name) for name in demo.TOOLS}
    assert "unknown" not in classes.values(), classes
    assert set(classes.values()) == {"read_only", "idempotent", "external_effect"}
    # What a real team would say: deploys, payments, messages and ticket updates reach the outside world.
    for name in ("deploy_service", "charge_card", "create_refund", "book_flight", "send_email", "update_ticket"):
        assert classes[name] == "external_effect", name
    assert classes["lookup_customer"] == classes["get_metrics"] == classes["search_flights"] == "read_only"
    assert classes["run_tests"] == "idempotent"


def test_seed_demo_stores_the_demo_tool_policies_once(db):
    call_command("seed_demo", "--sessions", "6", stdout=io.StringIO())
    called = set(Event.objects.filter(type="tool_result").values_list("data__name", flat=True))
    assert called and not called - set(demo.TOOLS)
    classes = selectors.side_effect_classes(set(demo.TOOLS), project_id=None)
    assert classes == {name: demo.side_effect_class(name) for name in demo.TOOLS}
    assert "unknown" not in classes.values()

    ToolPolicy.objects.filter(pattern="send_*").update(side_effect=ToolPolicy.IDEMPOTENT)  # a person's edit
    call_command("seed_demo", stdout=io.StringIO())
    assert ToolPolicy.objects.get(pattern="send_*").side_effect == ToolPolicy.IDEMPOTENT
    assert ToolPolicy.objects.count() == len(demo.TOOL_POLICIES)
