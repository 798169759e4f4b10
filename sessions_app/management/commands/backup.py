from pathlib import Path

from django.core.management.base import BaseCommand

from sessions_app.management import database_copies


class Command(BaseCommand):
    help = (
        "Back up the database the settings name to PATH, a new file of mode 0600, while the server runs:"
        " SQLite through its online backup API, PostgreSQL through pg_dump --format=custom."
    )
    # It reads the database file or runs pg_dump, and needs nothing the system checks look at.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="PATH", help="the backup file to write")
        parser.add_argument("--force", action="store_true", help="replace PATH if it exists (by default an existing file is refused)")

    def handle(self, *args, path: str, force: bool, **options):
        database = database_copies.Database.current()
        target = Path(path).absolute()
        database_copies.backup(database, target, force=force)
        self.stdout.write(f"Backed up {database} to {target} ({target.stat().st_size} bytes, mode 0600).")
