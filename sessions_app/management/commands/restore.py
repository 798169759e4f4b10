from pathlib import Path

from django.core.management.base import BaseCommand
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from sessions_app.management import database_copies


class Command(BaseCommand):
    help = (
        "Restore a backup made by `backup` into the database the settings name, which must be empty (a new"
        " SQLite file, or a PostgreSQL database without tables); a database holding anything is refused, untouched."
        " Stop the servers and the worker first."
    )
    # The target may not exist yet: nothing may touch it before the restore does.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="PATH", help="the backup file to restore")

    def handle(self, *args, path: str, **options):
        database = database_copies.Database.current()
        source = Path(path).absolute()
        database_copies.restore(database, source)
        self.stdout.write(f"Restored {source} into {database}.")
        executor = MigrationExecutor(connections["default"])
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        unknown = set(executor.loader.applied_migrations) - set(executor.loader.graph.nodes)
        if unknown:
            self.stderr.write(
                f"The backup was made by a newer Turnlog ({len(unknown)} migrations this version does not have):"
                " run that version, or restore a backup made by this one."
            )
        elif pending:
            self.stdout.write(f"The backup predates {len(pending)} migrations of this version: apply them with `migrate` before starting.")
