"""Believable agent sessions for demo data (`seed_demo`) and the live simulator (`simulate`).

Plain Python, deterministic from a seed: `scenario(seed)` always builds the same session.
A scenario is the list of batches an agent runtime would send, each a list of wire events
`{"type", "data"}`, plus the simulated seconds the agent spends before each batch (waiting
for the user, the model or a tool). Turns and steps are written as session-log.md section 3
describes; a crashing scenario stops inside its last turn, where recovery has work to do.
Tool output is untrusted text: some of it holds HTML such as `<b>` or `<script>`.

The agents (agents.py) call the fake tools (tools.py); scenarios.py writes their sessions.
"""

from sessions_app.lib.demo.agents import AGENT_NAMES, AUTO_RECOVERY_POLICIES
from sessions_app.lib.demo.scenarios import CRASH_POINTS, Scenario, scenario, stalled_scenario, timed_batches, unknown_effects
from sessions_app.lib.demo.tools import TOOL_POLICIES, TOOLS, side_effect_class
