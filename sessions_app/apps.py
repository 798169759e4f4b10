from django.apps import AppConfig
from django.db import DEFAULT_DB_ALIAS
from django.db.models.signals import post_migrate, pre_migrate


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Whatever path ends a login (the site, the admin, a command), open streams hear of it at once.
        from sessions_app.services import logins

        logins.connect_receivers()
        # Every migration step (manage.py migrate, the migration unit, `turnlog serve`) ends with the headless
        # first start of the TURNLOG_INIT_* variables; once per migrate: this app's signal is sent once.
        post_migrate.connect(first_start_after_migrate, sender=self)
        pre_migrate.connect(first_start_checked_before_migrate, sender=self)


def first_start_checked_before_migrate(*, using, **_):
    """A wrong TURNLOG_INIT_* variable stops migrate before its first migration, not after its last."""
    import os

    from django.core.management.base import CommandError

    from sessions_app.services import first_start

    if using == DEFAULT_DB_ALIAS:
        try:
            first_start.plan_from(os.environ)
        except first_start.InitError as error:
            raise CommandError(f"first start: {error}") from None


def first_start_after_migrate(*, using, verbosity=1, stdout=None, **_):
    from django.core.management import call_command

    if using == DEFAULT_DB_ALIAS:
        call_command("first_start", verbosity=verbosity, **({"stdout": stdout} if stdout is not None else {}))
