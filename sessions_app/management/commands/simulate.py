"""Live agent sessions written through the real HTTP API, as an agent runtime would write them.

The simulator is an HTTP client on purpose: writes from another process never reach the
server's in-memory channel layer, so the dashboard must show them anyway (docs/internals/architecture.md).
It talks through the Python client (turnlog_client), one request per planned batch:
`expected_seq` from the last answer, and an `Idempotency-Key` per batch so a retry after a
lost answer stores nothing twice.
"""

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sessions_app import services
from sessions_app.lib import demo
from sessions_app.management.commands.create_token import at_least
from sessions_app.models import ApiToken, Project, Role, hash_token
from sessions_app.selectors import access
from turnlog_client import ApiError, Client, TransportError, Unauthenticated

SIMULATOR_USERNAME = "simulator"
# Reused across runs, so that simulating does not leave a token per run behind.
TOKEN_FILE = Path(settings.TURNLOG_DATA_DIR) / "simulator-token"
RETRY_DELAYS = (0.5, 1.0, 2.0)  # seconds between attempts when the connection fails
MAX_FAILURES_IN_A_ROW = 5  # then the cause is systematic (wrong URL, a server bug): stop instead of spinning


class ServerUnreachable(Exception):
    def __init__(self, error: TransportError):
        super().__init__(str(error))
        self.reason = error


class SessionFailed(Exception):
    pass


class Simulation:
    """N worker threads, each playing one scenario after another until the run drains.

    `draining` stops new sessions and cuts the pauses, so sessions in flight finish as planned
    (only scenarios meant to crash leave open turns); `aborted` (Ctrl-C, or the server lost)
    stops every worker before its next request.
    """

    def __init__(
        self, api: Client, *, workers: int, rate: float, crash_rate: float, fork_rate: float, seed: int, say: Callable[[str, str, str], None]
    ):
        self.api, self.crash_rate, self.fork_rate, self.say = api, crash_rate, fork_rate, say
        self.session_rate = rate / workers  # events per second for each concurrent session
        self.seeds = random.Random(seed)
        self.lock = threading.Lock()
        self.draining, self.aborted = threading.Event(), threading.Event()
        self.fatal: str | None = None
        self.counts = dict.fromkeys(["finished", "crashed", "forked", "failed", "stopped", "events"], 0)
        self.failures_in_a_row = 0
        self.threads = [threading.Thread(target=self.work, daemon=True) for _ in range(workers)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def abort(self, reason: str | None = None) -> None:
        with self.lock:
            self.fatal = self.fatal or reason
        self.aborted.set()
        self.draining.set()

    def drain(self) -> None:
        """Start no new session, send what is left without pauses, and wait for the workers."""
        self.draining.set()
        for thread in self.threads:
            thread.join()

    def count(self, key: str, n: int = 1) -> int:
        """Add to a counter; returns how many sessions in a row have failed."""
        with self.lock:
            self.counts[key] += n
            if key in ("finished", "crashed"):
                self.failures_in_a_row = 0
            elif key == "failed":
                self.failures_in_a_row += 1
            return self.failures_in_a_row

    def work(self) -> None:
        while not self.draining.is_set():
            with self.lock:
                seed = self.seeds.getrandbits(32)
            scenario = demo.scenario(seed, crash_rate=self.crash_rate)
            try:
                self.play(scenario)
            except SessionFailed as error:
                self.say("failed", scenario.session_id, str(error))
                if self.count("failed") >= MAX_FAILURES_IN_A_ROW:
                    self.abort(f"{MAX_FAILURES_IN_A_ROW} sessions failed in a row; stopped (see the lines above)")
            except ServerUnreachable as error:
                self.abort(f"lost the server: {error}. Is it still running (`make run`)?")

    def play(self, scenario: demo.Scenario) -> None:
        try:
            self.api.create_session(scenario.session_id, agent_name=scenario.agent_name, metadata=scenario.metadata)
        except TransportError as error:
            raise ServerUnreachable(error) from error
        except ApiError as error:
            hint = " (was this --seed already simulated against this database?)" if error.status == 409 else ""
            raise SessionFailed(f"creating the session: {error}{hint}") from error
        events = len(scenario.events)
        self.say("started", scenario.session_id, f"{scenario.agent_name}, {events} events to send")
        # Keep the scenario's rhythm (user, model and tool latencies) at this session's share of --rate.
        scale = events / self.session_rate / scenario.duration if scenario.duration else 0.0
        next_seq = 0
        for index, (pause, batch) in enumerate(zip(scenario.pauses, scenario.batches, strict=True)):
            self.draining.wait(pause * scale)
            if self.aborted.is_set():
                self.count("stopped")
                self.say("stopped", scenario.session_id, f"after {next_seq} events")
                return
            next_seq = self.append(scenario.session_id, index, batch, next_seq)
            self.count("events", len(batch))
        if scenario.crashes:
            self.count("crashed")
            where = demo.CRASH_POINTS[scenario.crash_point]
            self.say("crashed", scenario.session_id, f"stopped mid-turn after {next_seq} events, {where}")
        else:
            self.count("finished")
            self.say("finished", scenario.session_id, f"{next_seq} events")
            with self.lock:
                forks = self.seeds.random() < self.fork_rate
            if forks:
                self.fork(scenario.session_id)

    def fork(self, session_id: str) -> None:
        """Hand the finished session on as a fork, as someone replaying it would."""
        try:
            answer = self.api.fork(session_id, boundary="last", new_id=f"{session_id}-fork")
        except TransportError as error:
            raise ServerUnreachable(error) from error
        except ApiError as error:
            raise SessionFailed(f"forking: {error}") from error
        self.count("forked")
        self.say("forked", answer["id"], f"from {session_id}, {answer['event_count']} events inherited")

    def append(self, session_id: str, index: int, batch: list[dict], expected_seq: int) -> int:
        """Send one batch; returns the next seq. Retries a failed connection with the same key."""
        for delay in (*RETRY_DELAYS, None):
            try:
                answer = self.api.append(session_id, batch, expected_seq=expected_seq, idempotency_key=f"{session_id}:{index}")
                return answer["next_seq"]
            except TransportError as error:
                if delay is None or self.aborted.is_set():
                    raise ServerUnreachable(error) from error
                time.sleep(delay)
            except ApiError as error:
                raise SessionFailed(f"batch {index} (seq {expected_seq}): {error}") from error
        raise AssertionError("unreachable")


class Command(BaseCommand):
    help = (
        "Run live agent sessions against a running server through its HTTP API "
        "(start the server first with `make run`). `make simulate` passes --url http://$HOST:$PORT, "
        "so give it the HOST and PORT you gave `make run` (`make run PORT=8123`, then `make simulate PORT=8123`)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--sessions", type=int, default=3, help="concurrent sessions (default 3)")
        parser.add_argument("--rate", type=float, default=5.0, help="events per second overall, roughly (default 5)")
        parser.add_argument(
            "--crash-rate", type=float, default=0.2, help="share of sessions that crash mid-turn (default 0.2)"
        )
        parser.add_argument(
            "--fork-rate", type=float, default=0.2, help="share of finished sessions that are forked (default 0.2)"
        )
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default http://127.0.0.1:8000; `make simulate HOST=... PORT=...` sets it as `make run` takes them)")
        parser.add_argument(
            "--token",
            help=f"API token; by default the user {SIMULATOR_USERNAME!r}'s token in this project's database (issued once, kept in TURNLOG_DATA_DIR)",
        )
        parser.add_argument("--seed", type=int, help="seed for reproducible sessions (default: random, printed)")
        parser.add_argument("--duration", type=float, help="seconds to run (default: until Ctrl-C)")

    def handle(self, *args, sessions, rate, crash_rate, fork_rate, url, token, seed, duration, **options):
        if sessions < 1 or rate <= 0 or not 0 <= crash_rate <= 1 or not 0 <= fork_rate <= 1:
            raise CommandError("--sessions must be at least 1, --rate above 0, --crash-rate and --fork-rate within 0..1")
        self.output_lock, self.started_at = threading.Lock(), time.monotonic()
        seed = random.SystemRandom().randrange(2**32) if seed is None else seed
        api = Client(url, token or "", timeout=15.0)
        status = self.probe(api)  # first, so a run against no server issues no token
        if not token:
            api.close()
            api = Client(url, self.local_token(), timeout=15.0)
            status = self.probe(api)
        if status == 401:
            hint = "" if token else " Its token was issued in this project's database: is the server using another one?"
            raise CommandError(f"the server at {url} refused the token (HTTP 401).{hint}")
        self.say(
            "simulate", url, f"{sessions} concurrent sessions, ~{rate:g} events/s, crash rate {crash_rate:g}, "
            f"seed {seed}; {f'{duration:g}s' if duration else 'Ctrl-C to stop'}"
        )  # fmt: skip
        simulation = Simulation(
            api, workers=sessions, rate=rate, crash_rate=crash_rate, fork_rate=fork_rate, seed=seed, say=self.say
        )
        simulation.start()
        try:
            simulation.aborted.wait(duration)
        except KeyboardInterrupt:
            self.say("stopping", url, "Ctrl-C: sessions in progress stop where they are")
            simulation.abort()
        simulation.drain()
        api.close()
        if simulation.fatal:
            raise CommandError(simulation.fatal)
        counts = simulation.counts
        elapsed = time.monotonic() - self.started_at
        self.say(
            "done", url, f"{counts['finished']} finished, {counts['crashed']} crashed, {counts['forked']} forked, {counts['failed']} failed, "
            f"{counts['stopped']} stopped; {counts['events']} events in {elapsed:.1f}s"
        )  # fmt: skip
        if counts["failed"]:
            raise CommandError(f"{counts['failed']} sessions failed; see the lines above")

    def say(self, what: str, subject: str, detail: str) -> None:
        with self.output_lock:
            self.stdout.write(f"[{time.monotonic() - self.started_at:7.1f}s] {what:<9} {subject}  {detail}")
            self.stdout.flush()

    def local_token(self) -> str:
        """The simulator's stored token, or a new one when it was never issued or no longer authenticates (revoked, expired).

        The simulator is a member of the default project, where its sessions go.
        """
        user, created = get_user_model().objects.get_or_create(username=SIMULATOR_USERNAME)
        if created:
            user.set_unusable_password()
            user.save()
        project = Project.default()
        at_least(user, Role.MEMBER, project)
        if TOKEN_FILE.exists():
            stored = TOKEN_FILE.read_text().strip()
            if ApiToken.objects.usable().filter(user=user, token_sha256=hash_token(stored)).exists():
                return stored
        _, token = services.issue_token(
            user=user, project=project, scopes=access.role_scopes(Role.MEMBER), name="simulate"
        )
        TOKEN_FILE.parent.mkdir(parents=True, exist_ok=True)
        TOKEN_FILE.write_text(token)
        TOKEN_FILE.chmod(0o600)
        return token

    def probe(self, api: Client) -> int:
        """The status of an authenticated read: 200, or 401 for a refused token."""
        try:
            answer = api.list_sessions(limit=1)
        except TransportError as error:
            raise CommandError(
                f"cannot reach the Turnlog server at {api.url} ({error}). "
                "Start it first with `make run`, or point --url at it (`make simulate` takes the HOST and PORT "
                "you gave `make run`: `make simulate PORT=8123`)."
            ) from None
        except Unauthenticated:
            return 401
        except ApiError as error:
            raise CommandError(f"{api.url} does not answer like a Turnlog server: {error}") from None
        if not (isinstance(answer, dict) and "items" in answer):
            raise CommandError(f"{api.url} does not answer like a Turnlog server: HTTP 200: {str(answer)[:160]}")
        return 200
