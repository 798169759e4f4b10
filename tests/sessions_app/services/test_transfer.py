import pytest

from sessions_app import services


@pytest.mark.django_db
def test_an_import_warns_of_an_agent_name_or_seed_length_that_does_not_fit_and_leaves_them_out():
    services.create_session(session_id="parent")
    blob = {"version": 2, "events": [], "agent_name": 7, "parent": {"session_id": "parent", "seed_length": 1}}
    session, warnings = services.import_blob(blob=blob, session_id="child")
    assert (session.agent_name, session.parent_id) == ("", None)
    assert [w.split(" ")[0] for w in warnings] == ["agent_name", "parent"]
