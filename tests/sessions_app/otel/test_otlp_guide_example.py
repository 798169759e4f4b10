"""The OTLP guide's example (docs/guide/otlp.md), run as written against a live Daphne with the environment it names."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.sessions_app.otel.test_pydantic_ai import closed, wait_for
from tests.servers import PROJECT_DIR


def guide_example() -> str:
    guide = (PROJECT_DIR / "docs" / "guide" / "otlp.md").read_text()
    section = guide[guide.index("## Send traces") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_guides_otlp_example_runs_and_its_session_reads_back(server, token, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(guide_example())
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"{server.url}/otlp",
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{token}",
    }
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    log = wait_for(lambda: closed(server, token, "order-a1"), what="the run's turn closed")
    assert any(e["type"] == "tool_result" and e["data"]["name"] == "refund" for e in log)
    assert log[-1]["data"]["reason"] == "complete"
