from django.core.management.base import BaseCommand

from sessions_app.models import Session
from sessions_app.services import ledger


class Command(BaseCommand):
    help = (
        "Fill the call ledger (GET /api/v1/calls, the /calls/ page) from the logs of sessions stored before it,"
        " one session at a time under its lock, in id order. Safe to run while agents append and to run again;"
        " an interrupted run resumes with --after <the last id it printed>."
    )

    def add_arguments(self, parser):
        parser.add_argument("--after", default="", help="start after this session id (resume)")
        parser.add_argument("--batch", type=int, default=500, help="session ids read per query")

    def handle(self, *args, after: str, batch: int, **options):
        sessions = calls = 0
        while True:
            ids = list(Session.objects.filter(id__gt=after).order_by("id").values_list("id", flat=True)[:batch])
            if not ids:
                break
            for session_id in ids:
                calls += ledger.rebuild_session(session_id) or 0
                sessions += 1
            after = ids[-1]
            self.stdout.write(f"rebuilt {sessions} sessions ({calls} calls), last {after}")
        self.stdout.write(f"done: {sessions} sessions, {calls} calls")
