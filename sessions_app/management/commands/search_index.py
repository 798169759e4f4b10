"""`manage.py search_index [--batch N]`: index every event still waiting for the search index, and every note.

The worker does this every second; the command is for a deployment without a worker running, or after
restoring a database. Resumable: each transaction commits its rows with the sessions' marks
(Session.search_indexed_seq), so a stopped run continues where it stopped.
"""

from django.core.management.base import BaseCommand, CommandError

from sessions_app.services import search as search_index


class Command(BaseCommand):
    help = (
        "Index the events the search index does not hold yet (in transactions of --batch events, each committed"
        " with its progress, so a stopped run resumes), then (re)index every note. Safe to run again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=search_index.BATCH_EVENTS, help="events per transaction (default %(default)s)")

    def handle(self, *args, batch: int, **options):
        if batch < 1:
            raise CommandError("--batch must be 1 or more")
        self.stdout.write(f"events indexed: {search_index.index_pending(wait=True, batch=batch)}")
        self.stdout.write(f"notes indexed: {search_index.reindex_notes()}")
