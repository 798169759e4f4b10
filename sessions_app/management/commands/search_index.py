"""`manage.py search_index [--batch N]`: index the events stored before the search index existed, and every note.

Resumable: each batch commits with its progress (sessions_app_search_backfill),
so a stopped run continues where it stopped. Events stored since the migration
are indexed as they are appended and are never visited.
"""

from django.core.management.base import BaseCommand, CommandError

from sessions_app.services import search_index


class Command(BaseCommand):
    help = (
        "Index the events stored before migration 0012_search (in batches, each committed with its progress, so a"
        " stopped run resumes), then (re)index every note. Safe to run again: it does what is left."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=5000, help="events per transaction (default 5000)")

    def handle(self, *args, batch: int, **options):
        if batch < 1:
            raise CommandError("--batch must be 1 or more")
        while True:
            done, until = search_index.backfill_step(batch=batch)
            self.stdout.write(f"events indexed up to id {done} of {until}")
            if done >= until:
                break
        self.stdout.write(f"notes indexed: {search_index.reindex_notes()}")
