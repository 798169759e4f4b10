"""Usage in the session page: the header's tokens by kind, cost and models; each turn's tokens and cost; each step's
model, provider, request parameters, tokens and cost; step_end and a plain turn_end folded into their heads."""

import re

import pytest

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def write(session_id: str, events: list[dict]) -> None:
    services.create_session(session_id=session_id, agent_name="bot")
    services.append_events(session_id=session_id, events=validate_batch(events))


def answer(usage: dict, **metadata) -> dict:
    return f.assistant("ok", metadata={"usage": usage, **metadata})


def turn(number: int, *messages: dict, reason: str = "complete", **end) -> list[dict]:
    return [
        f.user(), f.event("turn_start", turn=number), f.event("step_start", step=1), *messages,
        f.event("step_end", step=1, outcome="ok"), f.event("turn_end", turn=number, steps=1, reason=reason, **end),
    ]  # fmt: skip


def test_the_header_shows_tokens_by_kind_cost_and_models(viewer):
    write("s", turn(1, answer({"input_tokens": 12_000, "output_tokens": 300, "input_tokens_details": {"cached_tokens": 2000},
                               "output_tokens_details": {"reasoning_tokens": 100}}, model="gpt-4o")))  # fmt: skip
    page = viewer.get("/sessions/s/").content.decode()
    header = page[page.index('id="session-head"') :]
    header = header[: header.index("</header>")]
    assert "12.0k input (2,000 cache read, 0 cache write), 300 output (100 reasoning) tokens" in header
    assert "cost <span class=\"cost\">$" in header and '<code class="model-name">gpt-4o</code>' in header


def test_the_header_says_which_models_have_no_price(viewer):
    write("s", turn(1, answer({"input_tokens": 10, "output_tokens": 1}, model="house-model-9")))
    page = viewer.get("/sessions/s/").content.decode()
    assert "partly priced: house-model-9 has no price</span> ($0 for the rest)" in page


def test_turn_and_step_heads_show_tokens_cost_model_provider_and_parameters(viewer):
    settings = {"temperature": 0.2, "max_tokens": 512, "ignored": {"x": 1}}
    write("s", [
        *turn(1, answer({"input_tokens": 1000, "output_tokens": 100, "provider": "openai"}, model="gpt-4o", model_settings=settings)),
        *turn(2, answer({"input_tokens": 5, "output_tokens": 5}, model="claude-sonnet-4-5", provider="anthropic",
                        request={"gen_ai.request.top_p": 0.9})),
    ])  # fmt: skip
    page = viewer.get("/sessions/s/").content.decode()
    heads = re.findall(r'<header class="turn-head".*?</header>', page, re.S)
    assert ">1,100</span> tokens · <span class=\"cost\">$0.0035</span>" in heads[0] and ">10</span> tokens" in heads[1]
    steps = re.findall(r'<div class="step-head".*?\n  </div>', page, re.S)
    assert '<code class="model-name">gpt-4o</code> <span class="muted">openai</span>' in steps[0]
    assert "temperature 0.2 · max_tokens 512" in steps[0] and "ignored" not in steps[0] and ">1,100</span> tokens" in steps[0]
    assert '<code class="model-name">claude-sonnet-4-5</code> <span class="muted">anthropic</span>' in steps[1]
    assert "top_p 0.9" in steps[1] and ">10</span> tokens" in steps[1]


def test_step_end_and_a_plain_turn_end_fold_into_their_heads_but_another_reason_stays(viewer):
    write("s", [*turn(1, f.assistant("a")), *turn(2, f.assistant("b"), reason="max_steps")])
    page = viewer.get("/sessions/s/").content.decode()
    assert 'class="step-end"' not in page and "<span class=\"muted\">step_end</span>" not in page
    # The folded events keep their anchors (links to #seq-N land on the head).
    assert page.count('class="folded-end"') == 3 and 'id="seq-5"' in page and 'id="seq-4"' in page
    footers = re.findall(r'<footer class="turn-end.*?</footer>', page, re.S)
    assert len(footers) == 1 and "max_steps" in footers[0]
