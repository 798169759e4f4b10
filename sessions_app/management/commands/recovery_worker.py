"""`manage.py recovery_worker [--once] [--interval SECONDS]`: the clock-driven automatic recovery and retention's
sweep, stalls told to webhooks (sessions_app.worker), and between its rounds, every second, the webhook deliveries
that are due (sessions_app.services.notify), the search index's pending events (services.index_pending) and the
receipts tool policy changes ask to re-read (services.receipts)."""

import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import Error as DatabaseError
from django.db import connections

from sessions_app import services, worker
from sessions_app.lib import notify_systemd
from sessions_app.metrics import listener

INDEX_EVERY_SECONDS = 1.0  # how far the search index may trail the log when nobody searches (a search catches it up)
# The watchdog (systemd's WatchdogSec, the launcher's) is told before each step, at most this often: a long step (a
# webhook pass: up to 5 s and one attempt's timeout) then has nearly the whole watchdog time.
WATCHDOG_EVERY_SECONDS = 1.0


class Command(BaseCommand):
    help = (
        "Recover stalled sessions automatically where an auto-recovery policy allows it and every open turn is"
        " restart_turn (or, where the project asks for it, a reconciler settled every unknown call), ask reconcilers"
        " about calls with an unknown outcome, delete sessions past their project's retention, and send webhooks when sessions stall, are"
        " recovered or held; one line per session recovered, held, stalled, deleted or kept past retention (each kept one once). Runs a round every --interval seconds until"
        " SIGTERM or Ctrl-C; a database outage is logged and retried next round."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run one round and exit (non-zero if the database failed)")
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="seconds between rounds (default TURNLOG_WORKER_INTERVAL_SECONDS, %s)" % settings.TURNLOG_WORKER_INTERVAL_SECONDS,
        )

    def handle(self, *args, once: bool, interval: float | None, **options):
        interval = settings.TURNLOG_WORKER_INTERVAL_SECONDS if interval is None else interval
        if interval <= 0:
            raise CommandError("--interval must be above 0")
        verbose = options["verbosity"] >= 2
        if once:
            if not (self.round(verbose, finish_checks=True) and self.deliver(verbose) and self.index() and self.sweep(batches=None)):
                raise CommandError("the round failed: database unavailable")
            return
        if settings.TURNLOG_METRICS_BIND:
            self.serve_metrics(settings.TURNLOG_METRICS_BIND)
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
        self.stdout.write(f"recovery worker: a round every {interval:g} s")
        # From this loop itself, so a frozen or stuck worker goes silent and its supervisor restarts it.
        watchdog = notify_systemd.Watchdog(every=WATCHDOG_EVERY_SECONDS)
        notify_systemd.notify(notify_systemd.READY)
        try:
            next_round = time.monotonic()
            while not stop.is_set():
                watchdog.ping()
                if time.monotonic() >= next_round:
                    self.round(verbose)
                    next_round = time.monotonic() + interval
                    watchdog.ping()
                self.deliver(verbose)
                watchdog.ping()
                self.index()
                watchdog.ping()
                self.sweep()
                # Never asleep longer than a second (INDEX_EVERY_SECONDS), well inside the watchdog's time.
                stop.wait(max(0.0, min(next_round - time.monotonic(), INDEX_EVERY_SECONDS)))
        except KeyboardInterrupt:
            pass
        notify_systemd.notify(notify_systemd.STOPPING)
        for action in worker.finish_checks():  # a check being asked is finished (each at most its timeout)
            self.stdout.write(action.line())
        self.stdout.write("recovery worker: stopped")

    def serve_metrics(self, address: str) -> None:
        """The scrape at TURNLOG_METRICS_BIND; a wrong address stops the worker, a taken one only the metrics (said)."""
        try:
            listener.serve(address)
        except ValueError as error:
            raise CommandError(str(error)) from None
        except OSError as error:
            self.stderr.write(f"metrics: cannot serve at {address} ({error}); recovering without it")
            return
        self.stdout.write(f"recovery worker: metrics at http://{address}/metrics (no token: for the scraper's network only)")

    index_failing = False
    sweep_failing = False
    deliver_failing = False
    kept_said: set[tuple[str, str]] = set()  # (session id, why) of sessions kept past retention, said once

    def index(self) -> bool:
        """The search index's pending events; False when the database failed (retried every second, said once)."""
        try:
            services.index_pending(wait=False)
        except DatabaseError as exc:
            if not self.index_failing:
                self.stderr.write(f"search index: database unavailable, retrying every second: {type(exc).__name__}: {exc}".strip())
            self.index_failing = True
            connections.close_all()
            return False
        self.index_failing = False
        return True

    def sweep(self, batches: int | None = worker.SWEEP_BATCHES_PER_TICK) -> bool:
        """Receipts re-read after tool policies changed, a few batches a tick; False when the database failed (said once)."""
        try:
            worker.sweep_receipts(batches=batches)
        except DatabaseError as exc:
            if not self.sweep_failing:
                self.stderr.write(f"receipts: database unavailable, retrying every second: {type(exc).__name__}: {exc}".strip())
            self.sweep_failing = True
            connections.close_all()
            return False
        self.sweep_failing = False
        return True

    def deliver(self, verbose: bool) -> bool:
        """The webhook deliveries that are due; failures said (successes only with -v 2); False when the database failed."""
        try:
            sent = worker.deliver_webhooks()
        except DatabaseError as exc:
            if not self.deliver_failing:
                self.stderr.write(f"webhooks: database unavailable, retrying every second: {type(exc).__name__}: {exc}".strip())
            self.deliver_failing = True
            connections.close_all()
            return False
        self.deliver_failing = False
        for one in sent:
            if one.outcome != "delivered" or verbose:
                status = f" HTTP {one.status_code}" if one.status_code else ""
                self.stdout.write(f"webhook {one.webhook_id} attempt {one.attempt}: {one.outcome}{status}" + (f" ({one.error})" if one.error else ""))
        return True

    def round(self, verbose: bool, *, finish_checks: bool = False) -> bool:
        """One round, its actions logged; False when the database failed (the next round retries). With
        `finish_checks` (--once), the reconciler checks it started are waited for."""
        try:
            actions = worker.run_round()
            if finish_checks:
                actions += worker.finish_checks()
        except DatabaseError as exc:
            self.stderr.write(f"database unavailable, retrying next round: {type(exc).__name__}: {exc}".strip())
            connections.close_all()  # a fresh connection next round
            return False
        kept = {(a.session_id, a.why) for a in actions if a.outcome == worker.KEPT}
        for action in actions:
            if action.outcome == worker.KEPT and (action.session_id, action.why) in self.kept_said and not verbose:
                continue
            if action.outcome != worker.SKIPPED or verbose:
                self.stdout.write(action.line())
        self.kept_said = kept
        return True
