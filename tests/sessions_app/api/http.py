"""Requests and answer checks the API's test modules share."""


def make_session(api, session_id="s1", **fields):
    response = api.post("/api/v1/sessions", {"id": session_id, **fields})
    assert response.status_code == 201, response.content
    return response.json()


def append(api, session_id, events, **extra):
    headers = extra.pop("headers", {})
    return api.post(f"/api/v1/sessions/{session_id}/events", {"events": events, **extra}, **headers)


def assert_error(response, status, error=None):
    """An error answer: the status, JSON (response.json() insists) with words in `detail`, and the code `error` when given."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"]
    if error is not None:
        assert body["error"] == error
    return body
