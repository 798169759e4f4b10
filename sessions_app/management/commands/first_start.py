"""`manage.py first_start`: the headless first start of the TURNLOG_INIT_* variables (services/first_start.py).

`migrate` runs it after its migrations (sessions_app/apps.py), and so do the migration unit and `turnlog serve`;
run alone, it applies them to an already migrated database. Without any TURNLOG_INIT_* variable it does nothing."""

import os

from django.core.management.base import BaseCommand, CommandError

from sessions_app.management.database_copies import Database
from sessions_app.services import first_start


class Command(BaseCommand):
    help = (
        "Apply the TURNLOG_INIT_* variables (the first admin, project and token) once: a second run changes"
        " nothing and says so. Run by migrate after its migrations."
    )

    def handle(self, *args, **options):
        try:
            plan = first_start.plan_from(os.environ)
        except first_start.InitError as error:
            raise CommandError(f"first start: {error}") from None
        if plan is None:
            return
        done = first_start.apply_first_start(plan=plan)
        if options["verbosity"] >= 1:
            self.stdout.write(f"First start (TURNLOG_INIT_*) in {Database.current()}:")
            self.stdout.write("\n".join(f"  {line}" for line in done))
